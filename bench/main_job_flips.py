"""Which held-out tasks RL flips, run after run: the main job's recorded variants side by side.

Every ``bench/results/learn_main_job*.json`` that evaluated the same panel holds the SFT and RL success of
each test task. A task RL gains or loses in most runs is a systematic effect of RL on this recipe, not
sampling noise; this script counts, per task and per BabyAI level, how many runs gained it and how many
lost it, prints the table and writes it as JSON.

    python bench/main_job_flips.py                          # every recorded run on the most common panel
    python bench/main_job_flips.py --out bench/results/main_job_flips.json
    python bench/main_job_flips.py --panel 8db9a5836f936a30 --out bench/results/main_job_flips_constrained.json

It also prints each run's paired change and their mean, spread and range: the runs differ in their
settings, so these describe what RL did on this panel over the variants tried, not an interval for one.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

from common import write_json

from agentgym_core.evaluation.paired import paired_difference
from agentgym_env_babyai.levels import LEVELS as LEVEL_NAMES

RESULTS = Path(__file__).parent / "results"


def load_runs(paths: list[Path], panel: str | None = None) -> dict[str, dict]:
    """Runs by file stem, keeping only those on ``panel`` (the hash of tasks and conditions), by default
    the most common one."""
    runs = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in paths}
    panels = Counter(r.get("panel_hash") for r in runs.values())
    if panel is None:
        panel = panels.most_common(1)[0][0]
    elif panel not in panels:
        raise SystemExit(f"no run on panel {panel!r}; the runs' panels: "
                         + ", ".join(f"{h} ({n} run{'s' * (n != 1)})" for h, n in panels.most_common()))
    return {name: r for name, r in runs.items() if r.get("panel_hash") == panel}


def run_changes(runs: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Per run: tasks gained and lost by RL and the change in success (after - before, a fraction)."""
    changes = {}
    for name, r in runs.items():
        paired = paired_difference(r["sft_per_task"], r["rl_per_task"])
        changes[name] = {key: paired[key] for key in ("gained", "lost", "diff")}
    return changes


def spread(values: list[float]) -> dict[str, float]:
    """Mean, sample standard deviation (0 for one value), smallest and largest."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "sd": sd, "min": min(values), "max": max(values)}


def flips(runs: dict[str, dict]) -> dict[str, dict[str, int]]:
    """Per task: the SFT result of the first run, how many runs' SFT result differed from it
    (``sft_differs``), how many runs gained the task (0 -> 1) and how many lost it (1 -> 0)."""
    first = next(iter(runs.values()))
    table: dict[str, dict[str, int]] = {}
    for task in first["sft_per_task"]:
        rows = [(r["sft_per_task"][task], r["rl_per_task"][task]) for r in runs.values()]
        table[task] = {"sft": first["sft_per_task"][task],
                       "sft_differs": sum(s != first["sft_per_task"][task] for s, _ in rows),
                       "gained": sum(s == 0 and a == 1 for s, a in rows),
                       "lost": sum(s == 1 and a == 0 for s, a in rows)}
    return table


def by_level(table: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """The per-task counts summed over each BabyAI level (task i is level i % 40)."""
    levels: dict[str, dict[str, int]] = {}
    for task, row in table.items():
        name = LEVEL_NAMES[int(task.split(":")[1]) % len(LEVEL_NAMES)]
        level = levels.setdefault(name, {"tasks": 0, "sft": 0, "gained": 0, "lost": 0})
        level["tasks"] += 1
        for key in ("sft", "gained", "lost"):
            level[key] += row[key]
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="learn_main_job*.json files (default: every one)")
    parser.add_argument("--panel", default=None, help="the panel hash to compare on (default: the most common)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    runs = load_runs(args.runs or sorted(RESULTS.glob("learn_main_job*.json")), args.panel)
    table = flips(runs)
    levels = by_level(table)
    n = len(runs)
    print(f"{n} runs on one panel: {', '.join(runs)}")
    # The runs compare task by task only if they started from the same SFT results (copied warm starts).
    differs = sum(r["sft_differs"] for r in table.values())
    print(f"SFT results that differ from the first run's: {differs} of {n * len(table)} (task, run) pairs")
    print(f"{'level':26s} tasks  SFT  gained  lost   (summed over the {n} runs)")
    for name, row in levels.items():
        if row["gained"] or row["lost"]:
            print(f"{name:26s} {row['tasks']:5d} {row['sft']:4d} {row['gained']:7d} {row['lost']:5d}")
    flipped = {t: r for t, r in table.items() if r["gained"] or r["lost"]}
    # Were the flips spread at random, each run flipping each task with the same chance (the observed
    # rate), this many tasks would have flipped at least once: the fewer actually did, the more RL's
    # effect is the same from run to run.
    rate = sum(r["gained"] + r["lost"] for r in table.values()) / (n * len(table))
    at_random = len(table) * (1 - (1 - rate) ** n)
    half = sum(max(r["gained"], r["lost"]) * 2 >= n for r in flipped.values())
    print(f"tasks ever flipped: {len(flipped)} of {len(table)} (flips at random, at the observed rate of "
          f"{rate:.3f} per task and run: {at_random:.1f}); flipped in at least half the runs: {half}")
    for task, row in sorted(flipped.items(), key=lambda kv: -max(kv[1]["gained"], kv[1]["lost"])):
        print(f"  {task}: SFT {row['sft']}, gained in {row['gained']}, lost in {row['lost']} of {n}")
    changes = run_changes(runs)
    for name, c in changes.items():
        print(f"  {name}: {100 * c['diff']:+.1f} points ({c['gained']} gained, {c['lost']} lost)")
    change = spread([c["diff"] for c in changes.values()])
    print(f"change over the {n} runs: mean {100 * change['mean']:+.1f} points, sd {100 * change['sd']:.1f}, "
          f"from {100 * change['min']:+.1f} to {100 * change['max']:+.1f}")
    if args.out:
        write_json(args.out, {"panel_hash": next(iter(runs.values())).get("panel_hash"), "runs": list(runs),
                              "flipped": len(flipped), "flip_rate": rate, "flipped_if_at_random": at_random,
                              "per_run": changes, "change": change,
                              "per_task": table, "per_level": levels})
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
