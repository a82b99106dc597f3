"""Record a finished run of the main job (or a variant of it) as ``bench/results/learn_main_job*.json``.

Reads the run directory ``agentgym train`` wrote (``summary.json``, ``metrics.jsonl``, the steps'
trajectories) and, when given, the ``/usr/bin/time -v`` report of the run. Writes the per-task rows of
both evaluations, the paired change, the invalid-action rates, and per RL step: horizon, success,
invalid-action rate, episodes trained, step and rollout seconds, the groups whose environment rewards
differed (``mixed_groups``, recounted from the trajectories, so runs logged before that metric are
covered) and the groups with both a success and a failure (``success_mixed_groups``), and the actions
the policy chose (``action_mix``: the first words of each action, digits dropped), and the largest
peak RSS each phase logged (``peak_phase_rss_gb``: the run's true peak, which ``/usr/bin/time`` misses,
:func:`phase_peaks`).

    /usr/bin/time -v agentgym train examples/babyai_grpo_cpu.yaml trainer.run_dir=RUN 2> time.txt
    python bench/record_main_job.py RUN --time time.txt --commit $(git rev-parse --short HEAD) \
        --what "the main job as shipped" --command "..." --out bench/results/learn_main_job.json
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from datetime import date
from pathlib import Path

from common import write_json

from agentgym_core.evaluation.paired import paired_difference
from agentgym_core.rl.dynamic_sampling import count_mixed_groups
from agentgym_core.rollout.trajectory import Trajectory

STEP_KEYS = ("horizon", "success", "invalid_action_rate", "trained_trajectories", "time_step", "time_rollout",
             "update_seconds", "sampler_kl")
VERBS = ("toggle and go through", "go through", "go to", "pickup", "check available actions")


def action_kind(reply: str) -> str:
    """What a reply asked for, without the object: ``go to``, ``turn left``, ``toggle``... (BabyAI's verbs)."""
    action = reply.split("Action:")[-1].strip().lower()
    return next((verb for verb in VERBS if action.startswith(verb)), re.sub(r"\s*\d+$", "", action)[:40])


def step_groups(path: Path) -> dict[str, object]:
    """Group and action counts of one step's trajectories file (``mixed_groups`` as the trainer logs it)."""
    trajectories = [Trajectory.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines()]
    mixed, sampled = count_mixed_groups(trajectories)
    successes: dict[tuple[str, int], set[bool]] = defaultdict(set)
    actions: Counter[str] = Counter()
    for t in trajectories:
        if not t.failed:  # the environment broke it, not the policy
            successes[(t.env, t.task_id)].add(t.success)
            actions.update(action_kind(m["content"]) for m in t.messages if m["role"] == "assistant")
    return {"sampled_groups": sampled, "mixed_groups": mixed,
            "success_mixed_groups": sum(len(s) > 1 for s in successes.values()),
            "action_mix": dict(actions.most_common())}


def time_report(path: Path) -> dict[str, float]:
    """Wall seconds, user/system seconds and peak RSS bytes from a ``/usr/bin/time -v`` report."""
    text = path.read_text(encoding="utf-8", errors="replace")
    wall = re.search(r"Elapsed \(wall clock\) time .*?: (?:(\d+):)?(\d+):([\d.]+)", text)
    if wall is None:
        raise ValueError(f"{path}: no 'Elapsed (wall clock) time' line; pass the report of /usr/bin/time -v")
    hours, minutes, seconds = int(wall[1] or 0), int(wall[2]), float(wall[3])
    field = {name: float(re.search(rf"{name}.*?: ([\d.]+)", text)[1])
             for name in ("User time", "System time", "Maximum resident set size")}
    return {"wall_s": 3600 * hours + 60 * minutes + seconds, "user_s": field["User time"],
            "system_s": field["System time"], "peak_rss_bytes": int(field["Maximum resident set size"] * 1024)}


def phase_peaks(run: Path) -> dict[str, float]:
    """The largest peak RSS each phase logged (``peak_rss*`` metrics; the warm start's under ``warm_start_``),
    each evaluation on its own, named by its step (``eval_step9_peak_rss_gb``): the evaluations at the two
    ends of a run are different phases, and one key for both hid which of them peaked.

    The phase meters reset the kernel's high-water mark (VmHWM) at each phase, and ``/usr/bin/time``
    reads that mark when the process exits: its "Maximum resident set size" is the last phases' peak,
    not the run's. The run's peak is the largest of these."""
    peaks: dict[str, float] = {}
    for prefix, path in (("warm_start_", run / "warm_start" / "metrics.jsonl"), ("", run / "metrics.jsonl")):
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            phase = f"{prefix}eval_step{row.get('step')}_" if row.get("kind") == "eval" else prefix
            for key, value in row.items():
                if key.startswith("peak_rss") and isinstance(value, (int, float)):
                    peaks[phase + key] = max(peaks.get(phase + key, 0.0), float(value))
    if peaks:
        peaks["run"] = max(peaks.values())
    return peaks


def record(run: Path, *, what: str, command: str, commit: str, machine: str, time_file: Path | None) -> dict:
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    evals = [r for r in rows if r.get("kind") == "eval"]
    train = {int(r["step"]): r for r in rows if r.get("kind", "train") == "train" and "time_step" in r}
    if len(evals) < 2:
        raise ValueError(f"{run}: {len(evals)} evaluation rows in metrics.jsonl; the run did not finish both")
    first, last = evals[0], evals[-1]
    steps = []
    for step, row in sorted(train.items()):
        entry = {"step": step, **{k: row[k] for k in STEP_KEYS if k in row}}
        trajectories = run / "trajectories" / f"step_{step:06d}.jsonl"
        if trajectories.exists():
            entry.update(step_groups(trajectories))
        steps.append(entry)
    out = {"what": what, "command": command, "commit": commit, "date": date.today().isoformat(), "machine": machine,
           **(time_report(time_file) if time_file else {}), "peak_phase_rss_gb": phase_peaks(run),
           "panel_hash": last.get("panel_hash"),
           "sft_per_task": first["per_task"], "rl_per_task": last["per_task"],
           "paired": paired_difference(first["per_task"], last["per_task"]),
           "invalid_action_rate": {"sft": first["invalid_action_rate"], "after": last["invalid_action_rate"]},
           "updates": summary["updates"], "warnings": summary["warnings"], "rl_steps": steps}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the run directory (trainer.run_dir)")
    parser.add_argument("--time", type=Path, default=None, help="the /usr/bin/time -v report of the run")
    parser.add_argument("--what", required=True, help="one line: which recipe or variant this run is")
    parser.add_argument("--command", required=True, help="the command that made the run")
    parser.add_argument("--commit", required=True)
    parser.add_argument("--machine", required=True,
                        help="the machine, in words (CPU, cores, memory, how busy), for the record")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    data = record(args.run, what=args.what, command=args.command, commit=args.commit, machine=args.machine,
                  time_file=args.time)
    paired = data["paired"]
    print(f"{paired['before']:.1%} -> {paired['after']:.1%}: {100 * paired['diff']:+.1f} points, 95% CI "
          f"[{100 * paired['ci95'][0]:+.1f}, {100 * paired['ci95'][1]:+.1f}] (+{paired['gained']} / -{paired['lost']})")
    for s in data["rl_steps"]:
        top = ", ".join(f"{k} {v}" for k, v in list(s.get("action_mix", {}).items())[:3])
        print(f"step {s['step']}: success {s['success']:.3f}, groups mixed {s.get('mixed_groups')}/"
              f"{s.get('sampled_groups')} (success-mixed {s.get('success_mixed_groups')}), actions: {top}")
    write_json(args.out, data)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
