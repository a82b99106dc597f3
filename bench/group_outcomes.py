"""How RL's groups ended, by how many turns the expert needs for their task: which tasks give GRPO a signal?

A group (one task's ``rollout.group_size`` samples) teaches GRPO something only when its samples' outcomes
differ. This reads the saved trajectories of RL runs (``RUN/trajectories/step_*.jsonl``) and an expert log
that played their training tasks (``agentgym collect --policy expert``, or a run's
``warm_start/expert.jsonl``), and counts the groups that all succeeded, were mixed or all failed, by the
turns the expert took on the task (``unsolved``: not within the log's turn budget; ``not played``: a task
the log lacks).

    agentgym collect --env babyai --split train --category ... --n 2000 --max-turns 8 --out expert8.jsonl
    python bench/group_outcomes.py RUN [RUN ...] --expert expert8.jsonl --out bench/results/group_outcomes.json
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

from common import write_json

from agentgym_core.rollout.logs import read_rollout_log
from agentgym_core.rollout.trajectory import Trajectory

OUTCOMES = ("all solved", "mixed", "all failed")


def expert_turns(path: Path) -> dict[tuple[str, int], int | None]:
    """``(env, task_id)`` -> the turns the expert took to solve it, or None when it did not."""
    return {(r["env"], int(r["task_id"])): len(r.get("turns") or []) if r.get("success") else None
            for r in read_rollout_log(path)}


def band(turns: int | None, *, played: bool) -> str:
    if not played:
        return "not played"
    if turns is None:
        return "unsolved"
    return str(turns) if turns <= 3 else "4+"


def group_outcome(successes: list[bool]) -> str:
    return "all solved" if all(successes) else "all failed" if not any(successes) else "mixed"


def count_groups(runs: list[Path], expert: dict[tuple[str, int], int | None]) -> dict[str, dict[str, int]]:
    """Per band of expert turns: how many groups ended each way, over every step of every run."""
    table: dict[str, Counter] = defaultdict(Counter)
    for run in runs:
        steps = sorted((run / "trajectories").glob("step_*.jsonl"))
        if not steps:
            raise SystemExit(f"{run}: no trajectories/step_*.jsonl (was the run's trajectory log turned off?)")
        for step in steps:
            groups: dict[tuple[str, int], list[bool]] = defaultdict(list)
            for line in step.read_text(encoding="utf-8").splitlines():  # the trainer's step log: one record a line
                t = Trajectory.model_validate_json(line)
                if not t.failed:  # the environment broke it, not the policy (as record_main_job.step_groups)
                    groups[(t.env, t.task_id)].append(t.success)
            for task, successes in groups.items():
                table[band(expert.get(task), played=task in expert)][group_outcome(successes)] += 1
    return {name: {o: table[name][o] for o in OUTCOMES} for name in sorted(table, key=_band_order)}


def _band_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (100, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="RL run directories (their trajectories/ saved)")
    parser.add_argument("--expert", type=Path, required=True, help="an expert log of the runs' training tasks")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    table = count_groups(args.runs, expert_turns(args.expert))
    print(f"{'expert turns':<13}{'groups':>7}" + "".join(f"{o:>12}" for o in OUTCOMES))
    for name, counts in table.items():
        n = sum(counts.values())
        print(f"{name:<13}{n:>7}" + "".join(f"{counts[o] / n:>12.0%}" for o in OUTCOMES))
    if args.out:
        write_json(args.out, {"runs": [r.name for r in args.runs], "expert": args.expert.name, "groups": table})


if __name__ == "__main__":
    main()
