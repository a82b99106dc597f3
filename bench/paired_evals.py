"""Two checkpoints evaluated on the same tasks, paired: did RL beat its start on tasks the run never saw?

Reads the ``trajectories.jsonl`` of ``agentgym eval --out DIR`` runs: one or more evaluations of the
model before (``--before``) and as many of the model after (``--after``), each pair on one panel (e.g.
the test split, then ``--split heldout``). Every task must be evaluated once on each side. Writes the
per-task rows and the paired change (t interval over tasks, McNemar's exact p) for each panel and for
all of them together.

    agentgym eval --from RUN --model SFT/model --split heldout --limit 60 --out evals/sft_heldout
    agentgym eval --from RUN --model RUN/checkpoints/step_000012/model --split heldout --limit 60 \\
        --out evals/rl_heldout
    python bench/paired_evals.py --before evals/sft_heldout --after evals/rl_heldout \\
        --what "..." --out bench/results/paired_evals_X.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import write_json

from agentgym_core.evaluation.paired import paired_difference


def per_task(eval_dir: Path) -> dict[str, int]:
    """``env:task_id`` -> 1 (success) or 0, from an ``agentgym eval`` output directory (greedy: one sample a task).

    An episode the environment broke (``failed``: a crash or timeout) counts as 0, as the evaluation's own
    success does; :func:`env_failures` names them, so a comparison can say how many it holds.
    """
    rows: dict[str, int] = {}
    for line in (eval_dir / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        key = f"{record['env']}:{record['task_id']}"
        if key in rows:
            raise SystemExit(f"{eval_dir}: task {key} evaluated more than once; pair greedy evaluations of one sample")
        rows[key] = int(bool(record["success"]))
    return rows


def env_failures(eval_dir: Path) -> list[str]:
    """The ``env:task_id`` of every episode the environment broke in an ``agentgym eval`` output directory."""
    lines = (eval_dir / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    return sorted(f"{r['env']}:{r['task_id']}" for r in map(json.loads, filter(str.strip, lines)) if r.get("failed"))


def paired_panels(before: list[Path], after: list[Path]) -> dict:
    """Per panel (``before[i]`` against ``after[i]``) and over all of them: the rows and the paired change."""
    if len(before) != len(after):
        raise SystemExit(f"{len(before)} --before evaluations but {len(after)} --after: give one of each per panel")
    panels, all_before, all_after = [], {}, {}
    for b, a in zip(before, after, strict=True):
        rows_b, rows_a = per_task(b), per_task(a)
        if set(rows_b) != set(rows_a):
            raise SystemExit(f"{b} and {a} evaluated different tasks: {len(set(rows_b) ^ set(rows_a))} differ")
        if set(rows_b) & set(all_before):
            raise SystemExit(f"{b} repeats tasks of an earlier panel")
        panels.append({"before": str(b), "after": str(a), "before_per_task": rows_b, "after_per_task": rows_a,
                       "env_failures": {"before": env_failures(b), "after": env_failures(a)},
                       "paired": paired_difference(rows_b, rows_a)})
        all_before.update(rows_b)
        all_after.update(rows_a)
    return {"panels": panels, "paired": paired_difference(all_before, all_after)}


def line(name: str, paired: dict) -> str:
    n = paired["n_tasks"]
    low, high = (100 * x for x in paired["ci95"])
    return (f"{name}: {round(paired['before'] * n)}/{n} -> {round(paired['after'] * n)}/{n}, "
            f"{100 * paired['diff']:+.1f} points [{low:+.1f}, {high:+.1f}] ({paired['gained']} gained, "
            f"{paired['lost']} lost; McNemar p = {paired['mcnemar_p']:.3g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, nargs="+", required=True, help="agentgym eval --out dirs: the start")
    parser.add_argument("--after", type=Path, nargs="+", required=True, help="the same panels, the model after")
    parser.add_argument("--what", required=True, help="one line: which models these are")
    parser.add_argument("--machine", default="this project's 2-core AMD EPYC CPU (AVX512-BF16), 24 GiB")
    parser.add_argument("--out", type=Path, help="write the JSON here")
    args = parser.parse_args()
    result = {"what": args.what, "machine": args.machine, **paired_panels(args.before, args.after)}
    for panel in result["panels"]:
        print(line(panel["after"], panel["paired"]))
        broken = panel["env_failures"]
        if broken["before"] or broken["after"]:
            print(f"  counted as failures: {len(broken['before'])} episodes before and {len(broken['after'])} after "
                  f"that the environment broke (crash or timeout), not the policy")
    print(line("all panels", result["paired"]))
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
