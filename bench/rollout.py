"""Rollout throughput: the engine vs the round-synchronous baseline, on the same backend and workload.

For each parallelism P in --parallel (default 1, 8, 32) the same workload -- P BabyAI test tasks,
sampling at temperature 1 with a fixed seed, the same turn budget and token caps, the same loaded
backend -- is rolled out once per mode, in this run:

* ``engine``: the engine as designed: a trajectory is sampled again as soon as its own environment
  answers (no round barrier), it keeps its KV cache between turns (only new tokens prefilled), and
  a prompt prefix several trajectories start with (the instruction) is read once per rollout.
* ``round-sync``: the same, but every turn waits for the slowest trajectory before anyone samples
  (the anchor's round barrier). Only the scheduling differs from ``engine``.
* ``round-sync-reread``: the anchor's rollout: the round barrier AND every prompt read in full every
  turn (no KV cache kept between turns, no shared prefix), as a round-synchronous loop that
  re-renders the conversation each round does (also this engine before sessions existed).

Prints trajectories/min and sampled tokens/s per mode and the speedups of ``engine`` over each
baseline, with the 1-minute load average, and writes bench/results/rollout.json.

    python bench/rollout.py --threads 1                       # SmolLM2-135M on BabyAI, P = 1, 8, 32, 4 turns
    python bench/rollout.py --model tiny --parallel 1 8       # a quick smoke run with a tiny random model

On a GPU (no model hub there): ``--model qwen2.5-1.5b-shape`` builds a random model of that shape
(bench/gpu_rl_step.py's), and ``--lend-float32`` samples the way the trainer's rollouts do when
they share the learner's module: the float32 module is lent to the backend (which samples from a
bfloat16 copy of it on a GPU). The JSON records the device's name, the sampling dtype and each
mode's peak GPU memory:

    python bench/rollout.py --device cuda --model qwen2.5-1.5b-shape --lend-float32 \
        --parallel 32 --max-rounds 6 --max-new-tokens 96 --modes engine round-sync-reread

``--allow-cudnn-attention`` samples as the backend did before it ruled cuDNN's attention out (the
baseline of that change: run the same command with and without it), and ``--profile DIR`` writes a
cProfile of each mode, the way the host-side cost of that attention was found.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from pathlib import Path

import torch
from common import load_backend, write_json

from agentgym_core.plugins import PluginManager
from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams

MODES = {  # name -> (synchronous, reuse_kv_cache, share_prefixes)
    "engine": (False, True, True),
    "round-sync": (True, True, True),
    "round-sync-reread": (True, False, False),
}


def run_once(backend, env_cls, tasks, *, mode: str, args) -> dict[str, float]:
    synchronous, reuse, share = MODES[mode]
    backend.share_prefixes = share
    config = EngineConfig(
        sampling=SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed),
        max_turns=args.max_rounds, synchronous=synchronous, reuse_kv_cache=reuse, env_workers=32,
        step_timeout_s=600,
    )
    stats = backend.sessions.stats
    prefilled, reused, shared = stats.prefilled_tokens, stats.reused_tokens, stats.shared_prefix_tokens
    load = os.getloadavg()[0]
    if backend.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(backend.device)
    with RolloutEngine(backend, env_cls, num_envs=len(tasks), config=config, env_name="babyai") as engine:
        start = time.perf_counter()
        trajs = engine.run([EpisodeSpec(task_id=t) for t in tasks])
        wall = time.perf_counter() - start
    tokens = sum(t.num_sampled_tokens for t in trajs)
    return {
        "trajectories": len(trajs), "wall_s": wall, "trajectories_per_min": 60 * len(trajs) / wall,
        "sampled_tokens": tokens, "tokens_per_s": tokens / wall, "generation_calls": engine.stats.generation_calls,
        "gen_s": engine.stats.gen_seconds, "turns": sum(t.num_turns for t in trajs), "failed": engine.stats.failed,
        "successes": sum(t.success for t in trajs),
        "prefilled_tokens": stats.prefilled_tokens - prefilled, "reused_tokens": stats.reused_tokens - reused,
        "shared_prefix_tokens": stats.shared_prefix_tokens - shared,
        "load_avg_1m_start": load, "load_avg_1m_end": os.getloadavg()[0],
        **({"peak_gpu_allocated_gb": torch.cuda.max_memory_allocated(backend.device) / 1e9}
           if backend.device.type == "cuda" else {}),
    }


def build_backend(args) -> object:
    """The backend the run measures: loaded from --model, or (--lend-float32) lent a float32 module."""
    model = args.model
    if model == "qwen2.5-1.5b-shape":  # random weights of that shape, saved where the backend loads them
        import tempfile

        from common import save_random_qwen2
        from gpu_rl_step import QWEN2_5_1_5B

        model = tempfile.mkdtemp(prefix="rollout-bench-model-")
        device = "cuda" if args.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
        save_random_qwen2(model, QWEN2_5_1_5B, tokenizer_dir=args.tokenizer, device=device, dtype=torch.bfloat16)
    if not args.lend_float32:
        return load_backend(model, threads=args.threads, device=args.device, prefill=args.prefill)
    from agentgym_backend_transformers import make_backend
    from agentgym_backend_transformers.backend import pick_device
    from agentgym_core.models import load_pretrained

    if args.threads:
        torch.set_num_threads(args.threads)
    if model == "tiny":
        from agentgym_core.testing.tiny_model import tiny_chat_model

        module, tokenizer = tiny_chat_model()
        module.to(pick_device(args.device))
    else:
        module, tokenizer = load_pretrained(model, device=pick_device(args.device), dtype="float32")
    return make_backend({"prefill": args.prefill}, model=module, tokenizer=tokenizer)


def profiled(call, stem: Path):
    """``call()`` under cProfile; writes ``stem``.prof and ``stem``.txt (the functions by own time, then
    by cumulative time). On a GPU, time spent inside an op's call that does not wait for the device
    (no ``tolist``/``item`` near the top) is host work: launches, or plans built per shape."""
    import cProfile
    import io
    import pstats

    stem.parent.mkdir(parents=True, exist_ok=True)
    with cProfile.Profile() as calls:
        result = call()
    calls.dump_stats(stem.with_suffix(".prof"))
    text = io.StringIO()
    for order in ("tottime", "cumulative"):
        pstats.Stats(calls, stream=text).sort_stats(order).print_stats(40)
    stem.with_suffix(".txt").write_text(text.getvalue())
    print(f"profile: {stem}.txt", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model spec, or 'tiny' (random tiny Llama)")
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--max-rounds", type=int, default=4, help="turn budget per trajectory (the BabyAI recipe starts at 4)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (use 1 on a shared machine)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--prefill", default="auto", choices=["auto", "batched", "per_row"],
                        help="how rows joining the batch are read (backend option; auto = per_row on CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default=None,
                        help="a Hugging Face tokenizer folder for --model qwen2.5-1.5b-shape (default: the embedded model's)")
    parser.add_argument("--lend-float32", action="store_true",
                        help="lend the backend a float32 module, as the trainer does when rollouts share its module")
    parser.add_argument("--allow-cudnn-attention", action="store_true",
                        help="let torch pick cuDNN's attention while sampling, as the backend did before it "
                             "ruled it out (the baseline for that change; matters on Hopper GPUs only)")
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="profile each mode with cProfile into DIR (the profiler slows every mode: read its "
                             "tables, not the speeds)")
    parser.add_argument("--out", default="bench/results/rollout.json")
    args = parser.parse_args()
    backend = build_backend(args)
    backend.allow_cudnn_attention = args.allow_cudnn_attention
    env_cls = PluginManager(autoload=True, allow=["babyai"]).env_class("babyai")
    test = env_cls.tasks().split("test")
    results = {"model": args.model, "device": str(backend.device), "torch_threads": torch.get_num_threads(),
               "cpu_count": os.cpu_count(), "max_rounds": args.max_rounds, "max_new_tokens": args.max_new_tokens,
               "prefill": args.prefill, "lend_float32": args.lend_float32,
               "allow_cudnn_attention": args.allow_cudnn_attention, "torch": torch.__version__,
               "device_name": torch.cuda.get_device_name(backend.device) if backend.device.type == "cuda" else "cpu",
               "module_dtype": str(next(backend.source.parameters()).dtype),
               "sampling_dtype": str(next(backend.model.parameters()).dtype),
               "modes": {m: {"synchronous": s, "reuse_kv_cache": r, "share_prefixes": p} for m, (s, r, p) in MODES.items()}, "runs": []}
    print(f"{'P':>3} {'mode':>18} {'traj/min':>9} {'tok/s':>7} {'wall s':>7} {'turns':>5} {'prefilled':>9} "
          f"{'reused':>7} {'load':>5}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for p in args.parallel:
        tasks = [test[i % len(test)] for i in range(p)]
        row: dict = {"parallel": p}
        for mode in args.modes:
            once = functools.partial(run_once, backend, env_cls, tasks, mode=mode, args=args)
            r = profiled(once, Path(args.profile) / f"P{p}_{mode}") if args.profile else once()
            row[mode] = r
            print(f"{p:>3} {mode:>18} {r['trajectories_per_min']:>9.2f} {r['tokens_per_s']:>7.2f} {r['wall_s']:>7.1f} "
                  f"{r['turns']:>5} {r['prefilled_tokens']:>9} {r['reused_tokens']:>7} {r['load_avg_1m_end']:>5.1f}",
                  flush=True)
        if "engine" in row:
            for base in (m for m in args.modes if m != "engine"):
                speedup = row["engine"]["trajectories_per_min"] / row[base]["trajectories_per_min"]
                row[f"speedup_vs_{base}"] = speedup
                print(f"{p:>3} engine vs {base}: x{speedup:.2f} traj/min, "
                      f"x{row['engine']['tokens_per_s'] / row[base]['tokens_per_s']:.2f} tok/s", flush=True)
        results["runs"].append(row)
        write_json(out, results)  # partial results survive an interrupted run
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
