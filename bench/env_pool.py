"""Rollout throughput over an environment pool: 1 vs 3 servers of an environment that is the bottleneck.

The environment (``slow_sim``) is a text game whose every reset/step occupies its server for
``--step-ms`` (50 ms by default), one call at a time: it runs on the server's event loop
(``inline_calls``), as a single-threaded simulator process would. One server then answers at most
1000/step_ms calls per second, however many episodes wait on it; a pool of N such servers should
answer N times as many, which is what ``envs[].urls`` is for. The servers are in-process
``serve_env`` servers on loopback (each its own event-loop thread; the simulated work is a sleep,
so the figures do not depend on how many CPU cores this machine has free).

The rollout is the trainer's: one :class:`RolloutEngine` over an :class:`EnvPool`, with the tiny
random model sampling (``--max-new-tokens`` per turn). Each pool size runs ``--repeats`` times,
interleaved (1, 3, 1, 3, ...) so a busy machine slows both alike; the JSON keeps every run and the
medians.

    python bench/env_pool.py                     # writes bench/results/env_pool.json
    python bench/env_pool.py --servers 1 2 3 --episodes 48
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import time
from typing import Any

from common import load_backend, write_json

from agentgym_core.env import Env, ResetResult, StepResult, TaskCatalog
from agentgym_core.http.pool import EnvPool
from agentgym_core.rollout import EngineConfig, EnvSource, EpisodeSpec, RolloutEngine, SamplingParams
from agentgym_core.testing import serve_env


def slow_sim_env(step_ms: float) -> type[Env]:
    """An environment class whose reset and step hold its server for ``step_ms`` (one call at a time)."""
    seconds = step_ms / 1000.0

    class SlowSimEnv(Env):
        name = "slow_sim"
        inline_calls = True  # on the server's event loop: the server does one call at a time
        max_episode_steps = 100

        def __init__(self) -> None:
            self.turn = 0

        @property
        def instruction(self) -> str:
            return "Walk to the end of the corridor. Reply with Action: forward"

        @classmethod
        def tasks(cls) -> TaskCatalog:
            return TaskCatalog(splits={"train": list(range(64)), "test": []})

        def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
            time.sleep(seconds)
            self.turn = 0
            return ResetResult(observation=f"Corridor {task_id}. You are at the start.")

        def step(self, action: str) -> StepResult:
            time.sleep(seconds)
            self.turn += 1
            return StepResult(observation=f"You are {self.turn} steps in.", reward=0.0)

    return SlowSimEnv


def one_run(backend: Any, urls: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Roll out ``args.episodes`` episodes over a pool of ``urls``; steps/s, trajectories/s and per-server steps."""
    pool = EnvPool(urls, env="slow_sim", timeout=60)
    pool.check()
    config = EngineConfig(max_turns=args.turns, max_total_tokens=4096, env_workers=args.concurrency,
                          sampling=SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0))
    episodes = [EpisodeSpec(task_id=i % 64, sample_index=i // 64, env="slow_sim") for i in range(args.episodes)]
    with RolloutEngine(backend, {"slow_sim": EnvSource(pool.make_env, args.concurrency)}, config=config) as engine:
        start = time.perf_counter()
        trajectories = engine.run(episodes)
        seconds = time.perf_counter() - start
    counts = pool.snapshot()
    pool.close()
    steps = sum(t.num_turns for t in trajectories)
    return {
        "servers": len(urls), "seconds": round(seconds, 3), "env_steps": steps,
        "env_steps_per_s": round(steps / seconds, 2), "trajectories_per_s": round(len(trajectories) / seconds, 3),
        "failed": sum(t.failed for t in trajectories), "generation_seconds": round(engine.stats.gen_seconds, 3),
        "steps_per_server": [c.steps for c in counts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 3], help="pool sizes to compare")
    parser.add_argument("--step-ms", type=float, default=50.0, help="server time of one reset/step")
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=12, help="episodes in flight (envs[].max_concurrency)")
    parser.add_argument("--turns", type=int, default=4, help="turns per episode")
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the tiny model")
    parser.add_argument("--out", default="bench/results/env_pool.json")
    args = parser.parse_args()

    backend = load_backend("tiny", threads=args.threads)
    env_cls = slow_sim_env(args.step_ms)
    runs: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve_env(env_cls)) for _ in range(max(args.servers))]
        one_run(backend, urls[:1], argparse.Namespace(**{**vars(args), "episodes": 2}))  # warm-up
        for repeat in range(args.repeats):
            for n in args.servers:
                run = {"repeat": repeat, **one_run(backend, urls[:n], args)}
                runs.append(run)
                print(f"{n} server(s): {run['env_steps_per_s']:.1f} env steps/s, {run['trajectories_per_s']:.2f} "
                      f"trajectories/s in {run['seconds']:.2f}s (steps per server {run['steps_per_server']})")
    medians = {n: statistics.median(r["env_steps_per_s"] for r in runs if r["servers"] == n) for n in args.servers}
    base = medians[args.servers[0]]
    summary = {str(n): {"env_steps_per_s": m, "speedup": round(m / base, 2)} for n, m in medians.items()}
    for n, row in summary.items():
        print(f"median {n} server(s): {row['env_steps_per_s']:.1f} env steps/s (x{row['speedup']:.2f})")
    path = write_json(args.out, {
        "what": "rollout env steps/s over an env pool of N servers; each server does one 'step_ms' call at a time",
        "command": "python bench/env_pool.py " + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items() if k != "out"),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "summary": summary, "runs": runs,
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
