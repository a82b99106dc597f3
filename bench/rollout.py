"""Rollout throughput: the engine (no round barrier) vs a round-synchronous baseline.

For each parallelism P in --parallel (default 1, 8, 32) the same workload -- P BabyAI test tasks,
greedy-free sampling with a fixed seed, the same turn budget -- is rolled out twice in this run:
once by the engine as designed, and once with ``synchronous=True`` (every turn waits for the
slowest trajectory before anyone samples, as the anchor does). Prints trajectories/min and
sampled tokens/s and writes bench/results/rollout.json.

    python bench/rollout.py                       # SmolLM2-135M on BabyAI, P = 1, 8, 32
    python bench/rollout.py --model tiny --parallel 1 8   # a quick smoke run with a tiny random model
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from agentgym_backend_transformers import TransformersBackend, make_backend
from agentgym_core.plugins import PluginManager
from agentgym_core.rollout import EpisodeSpec, RolloutConfig, RolloutEngine, SamplingParams


def run_once(backend, env_cls, tasks, *, synchronous: bool, args) -> dict[str, float]:
    config = RolloutConfig(
        sampling=SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed),
        max_turns=args.max_rounds, synchronous=synchronous, env_workers=32, step_timeout_s=300,
    )
    with RolloutEngine(backend, env_cls, num_envs=len(tasks), config=config, env_name="babyai") as engine:
        start = time.perf_counter()
        trajs = engine.run([EpisodeSpec(task_id=t) for t in tasks])
        wall = time.perf_counter() - start
    tokens = sum(t.num_sampled_tokens for t in trajs)
    return {
        "trajectories": len(trajs), "wall_s": wall, "trajectories_per_min": 60 * len(trajs) / wall,
        "sampled_tokens": tokens, "tokens_per_s": tokens / wall, "generation_calls": engine.stats.generation_calls,
        "turns": sum(t.num_turns for t in trajs), "failed": engine.stats.failed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model spec, or 'tiny' (random tiny Llama)")
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-rounds", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/rollout.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model == "tiny":
        from agentgym_core.testing.tiny_model import tiny_chat_model

        backend = TransformersBackend(*tiny_chat_model())
    else:
        backend = make_backend({"model": args.model, "threads": args.threads})
    env_cls = PluginManager(autoload=True, allow=["babyai"]).env_class("babyai")
    test = env_cls.tasks().split("test")
    results = {"model": args.model, "device": str(backend.device), "torch_threads": torch.get_num_threads(),
               "max_rounds": args.max_rounds, "max_new_tokens": args.max_new_tokens, "runs": []}
    print(f"{'P':>3} {'mode':>12} {'traj/min':>9} {'tok/s':>8} {'wall s':>7} {'gen calls':>9}")
    for p in args.parallel:
        tasks = [test[i % len(test)] for i in range(p)]
        row = {"parallel": p}
        for mode, sync in (("engine", False), ("round-sync", True)):
            r = run_once(backend, env_cls, tasks, synchronous=sync, args=args)
            row[mode] = r
            print(f"{p:>3} {mode:>12} {r['trajectories_per_min']:>9.2f} {r['tokens_per_s']:>8.1f} {r['wall_s']:>7.1f} "
                  f"{r['generation_calls']:>9}", flush=True)
        row["speedup"] = row["engine"]["trajectories_per_min"] / row["round-sync"]["trajectories_per_min"]
        print(f"{p:>3} speedup (traj/min) x{row['speedup']:.2f}", flush=True)
        results["runs"].append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
