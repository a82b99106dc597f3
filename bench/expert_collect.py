"""Expert demonstrations in one process against several: the main job's first phase, timed.

The main job (``examples/babyai_grpo_cpu.yaml``) starts by letting BabyAI's expert play 400 training
tasks (a seeded shuffle of the train split, 12 turns each). The expert is minigrid's BabyAIBot, whose
path searches are pure Python, so one process keeps one core busy. ``collect(..., workers=N)`` plays
the same tasks in N worker processes. This script collects the recipe's tasks with one process, then
with ``--workers`` processes, in one invocation, and reports the wall times, their ratio, and whether
the two logs hold the same episodes (everything but the timing fields).

    python bench/expert_collect.py [--n 400] [--workers 2] [--out bench/results/expert_collect.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _episodes(path: Path) -> list[dict]:
    """The log's records without their timings (which differ from run to run)."""
    records = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record.pop("timing", None)
        record["turns"] = [{k: v for k, v in turn.items() if "seconds" not in k} for turn in record["turns"]]
        records.append(record)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=400, help="training tasks the expert plays (the recipe: 400)")
    parser.add_argument("--workers", type=int, default=2, help="processes of the compared run")
    parser.add_argument("--out", default=str(RESULTS / "expert_collect.json"))
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).parent))
    from common import write_json

    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.config import CollectConfig

    runs, logs = {}, {}
    load = os.getloadavg()[0]  # what else ran: the times are those of a shared CPU when it is high
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, args.workers):
            out = Path(tmp) / f"workers_{workers}.jsonl"
            t0 = time.perf_counter()
            result = collect(CollectConfig(env="babyai", policy="expert", split="train", n=args.n, shuffle=True,
                                           seed=0, max_turns=12, workers=workers, out=str(out)), progress=False)
            seconds = time.perf_counter() - t0
            runs[workers] = {"workers": workers, "seconds": seconds, "episodes": result.trajectories,
                             "successes": result.successes}
            logs[workers] = _episodes(out)
            print(f"{workers} process(es): {seconds:.1f} s, {result.successes}/{result.trajectories} solved", flush=True)
    same = logs[1] == logs[args.workers]
    ratio = runs[args.workers]["seconds"] / runs[1]["seconds"]
    print(f"{args.workers} processes: x{ratio:.2f} the time of one; same episodes: {same}")
    summary = {"n": args.n, "cpu_count": os.cpu_count(), "load_avg_1m_start": load, "runs": list(runs.values()),
               "time_ratio": ratio, "same_episodes": same}
    print(f"wrote {write_json(args.out, summary)}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
