"""Measure BabyAIEnv's per-step overhead over raw minigrid, and the expert's solve rate.

Run: python agentgym_env_babyai/bench/step_overhead.py [--tasks N]
Prints numbers and writes bench/results/babyai_step_overhead.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from agentgym_env_babyai import TEST_IDS, BabyAIEnv, solve, task_level_seed
from agentgym_env_babyai.levels import make_level
from agentgym_env_babyai.view import View

PRIMITIVES = {"turn left": 0, "turn right": 1, "move forward": 2}


def time_steps(task_ids: list[int], steps_per_task: int) -> dict[str, float]:
    rng = random.Random(0)
    scripts = {t: [rng.choice(list(PRIMITIVES)) for _ in range(steps_per_task)] for t in task_ids}
    env = BabyAIEnv()
    raw_s = ours_s = view_s = 0.0
    n = 0
    for task in task_ids:
        level, seed = task_level_seed(task)
        game = make_level(level)
        game.reset(seed=seed)
        env.reset(task)
        for action in scripts[task]:
            t0 = time.perf_counter()
            obs, _, term, trunc, _ = game.step(PRIMITIVES[action])
            t1 = time.perf_counter()
            View(obs["image"].tolist(), None)
            t2 = time.perf_counter()
            result = env.step(action)
            t3 = time.perf_counter()
            raw_s, view_s, ours_s, n = raw_s + t1 - t0, view_s + t2 - t1, ours_s + t3 - t2, n + 1
            if term or trunc or result.done:
                break
    return {
        "steps": n,
        "raw_minigrid_us": raw_s / n * 1e6,
        "view_build_us": view_s / n * 1e6,
        "env_step_us": ours_s / n * 1e6,
        "overhead_us": (ours_s - raw_s) / n * 1e6,
    }


def expert_rate(task_ids: list[int]) -> dict[str, object]:
    env = BabyAIEnv()
    t0 = time.perf_counter()
    results = [solve(env, t) for t in task_ids]
    failed: dict[str, int] = {}
    for r in results:
        if not r.success:
            name = task_level_seed(r.task_id)[0]
            failed[name] = failed.get(name, 0) + 1
    return {
        "tasks": len(task_ids),
        "solved": sum(r.success for r in results),
        "turns": sum(r.turns for r in results),
        "seconds": time.perf_counter() - t0,
        "failed_by_level": failed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=200, help="train tasks (ids 0..N-1) for the expert rate")
    args = parser.parse_args()
    figures = {
        "step": time_steps(list(range(80)), 50),
        "expert_test": expert_rate(list(TEST_IDS)),
        "expert_train_prefix": expert_rate(list(range(args.tasks))),
    }
    print(json.dumps(figures, indent=2))
    out = Path("bench/results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "babyai_step_overhead.json").write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
