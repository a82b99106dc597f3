"""The end of an RL run in a few lines: did RL change held-out success, did it keep actions valid, did it update.

:func:`summarize_run` compares the evaluation RL started from (after the warm start's SFT, or before RL)
with the one after RL, on the same tasks:

* success at both ends, and the paired change over tasks with its 95% interval
  (:func:`agentgym_core.evaluation.paired.paired_difference`, a t interval on the per-task differences)
  and McNemar's exact test on the tasks that flipped, which stays valid where few tasks flip and the t
  interval is shaky;
* the invalid-action rate at both ends (the share of turns whose action the environment refused);
* how many RL steps updated the policy (a step whose groups all tied trains nothing), and how many of
  the sampled groups had differing environment rewards: the groups GRPO-style estimators learn the
  task from (the others can still differ in ``algorithm.invalid_action_penalty``'s charges).

It names what should not pass unnoticed in ``warnings``: held-out success falling (its interval below
zero), the invalid-action rate rising by more than :data:`INVALID_RISE` while success did not rise (its
interval does not exclude zero), a run in which no step updated the policy, and a run in which fewer
than :data:`LOW_SIGNAL` of the groups had differing rewards. :func:`format_summary` prints it;
``agentgym train`` writes it to ``summary.json`` in the run directory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentgym_core.evaluation.paired import paired_difference
from agentgym_core.rollout.progress import format_seconds

__all__ = ["INVALID_RISE", "LOW_SIGNAL", "describe_sampling", "format_summary", "summarize_run"]

INVALID_RISE = 0.05  # a rise of the invalid-action rate past 5 points is named, unless success rose with it
LOW_SIGNAL = 0.25  # a run whose groups' rewards differed in fewer than a quarter of them is named


def summarize_run(results: Mapping[str, Any], train_log: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The run's summary from ``train``'s (or ``run_rl_recipe``'s) results and its ``metrics.jsonl`` rows.

    Returns ``start`` ("sft" or "before"), ``tasks``, ``success`` and ``invalid_action_rate`` (each
    ``{start: rate, "after": rate}``, None where not measured), ``paired`` (the paired change with
    ``ci95``, ``interval`` naming its method and ``mcnemar_p``; None unless both ends share 2+ tasks),
    ``updates`` (``steps``, ``updated``: steps whose update ran, ``trained_trajectories``, and
    ``mixed_groups`` of ``sampled_groups``: groups whose rewards differed, where the log counts them) and
    ``warnings``; ``samples_per_task`` and ``temperature`` say how the panel was played, ``eval_seconds``
    how long each evaluation took (None in logs from before it was recorded).
    """
    start = "sft" if results.get("eval_sft") else "before"
    first = results.get("eval_sft") or results.get("eval_before") or {}
    last = results.get("eval_after") or {}
    summary: dict[str, Any] = {
        "start": start,
        "tasks": int(last.get("tasks") or first.get("tasks") or 0),
        "horizon": last.get("horizon", first.get("horizon")),
        "samples_per_task": int(last.get("samples_per_task") or first.get("samples_per_task") or 1),
        "temperature": last.get("temperature", first.get("temperature")),
        "success": {start: first.get("success"), "after": last.get("success")},
        "invalid_action_rate": {start: first.get("invalid_action_rate"), "after": last.get("invalid_action_rate")},
        "eval_seconds": {start: first.get("wall_seconds"), "after": last.get("wall_seconds")},
        "paired": None,
    }
    both = set(first.get("per_task") or {}) & set(last.get("per_task") or {})
    hashes = (first.get("panel_hash"), last.get("panel_hash"))
    same_panel = None in hashes or hashes[0] == hashes[1]  # logs before the hash cannot tell
    if len(both) >= 2 and same_panel:  # one shared task has no interval: the table still gives both rates
        summary["paired"] = paired_difference(first["per_task"], last["per_task"])
    summary["updates"] = _updates(train_log)
    summary["warnings"] = _warnings(summary)
    if not same_panel:
        summary["warnings"].insert(0, f"the evaluations at the two ends played different panels (hashes {hashes[0]} "
                                      f"and {hashes[1]}: other tasks, sampling, horizon or samples per task), so "
                                      "they are not compared task by task")
    return summary


def _updates(train_log: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    by_step = {int(row["step"]): row for row in train_log if row.get("kind", "train") == "train" and "step" in row}
    updates = {"steps": len(by_step),  # a step logged twice (killed, then resumed) counts once: its last row
               "updated": sum(1 for row in by_step.values() if not row.get("skipped_update", 0.0)),
               "trained_trajectories": int(sum(row.get("trained_trajectories", 0.0) for row in by_step.values()))}
    if by_step and all("sampled_groups" in row for row in by_step.values()):  # logs before the count have none
        for key in ("mixed_groups", "sampled_groups"):
            updates[key] = int(sum(row[key] for row in by_step.values()))
    return updates


def _warnings(summary: dict[str, Any]) -> list[str]:
    warnings = []
    start = summary["start"]
    before, after = summary["invalid_action_rate"][start], summary["invalid_action_rate"]["after"]
    paired = summary["paired"]
    success_rose = paired is not None and paired["ci95"][0] > 0
    if paired is not None and paired["ci95"][1] < 0:
        name = "after SFT" if start == "sft" else "before RL"
        warnings.append(f"held-out success fell ({_points(paired['diff'])}, 95% CI {_interval(paired['ci95'])}; "
                        f"{paired['lost']} tasks lost, {paired['gained']} gained): RL left the policy worse than it "
                        f"was {name}; the metrics' mixed_groups and the trajectories show what it learned instead")
    if before is not None and after is not None and after - before > INVALID_RISE and not success_rose:
        change = f" (success {_points(paired['diff'])}, 95% CI {_interval(paired['ci95'])})" if paired else ""
        warnings.append(f"the invalid-action rate rose from {100 * before:.1f}% to {100 * after:.1f}% while "
                        f"success did not rise{change}: the policy learned actions the environment refuses "
                        "(algorithm.invalid_action_penalty charges for them)")
    updates = summary["updates"]
    if updates["steps"] and not updates["updated"]:
        warnings.append(f"no RL step updated the policy: in all {updates['steps']} steps every group's rewards "
                        "tied (more tasks per step, larger groups or partial credit give groups a signal)")
    elif (updates.get("sampled_groups") and updates["mixed_groups"] < LOW_SIGNAL * updates["sampled_groups"]
          and not success_rose):
        warnings.append(f"only {updates['mixed_groups']} of {updates['sampled_groups']} groups had differing rewards: "
                        "RL had little to learn the task from (rollout.curriculum, rollout.dynamic_sampling or "
                        "larger groups put more tasks of middle difficulty in a step)")
    return warnings


def describe_sampling(temperature: float | None, samples_per_task: int = 1) -> str:
    """How a held-out panel was played, in words: "greedy", "sampled at temperature 0.7", or with K > 1
    "4 episodes a task sampled at temperature 1, success = each task's rate (Avg@4)"."""
    sampling = "greedy" if not temperature else f"sampled at temperature {temperature:g}"
    if samples_per_task > 1:
        sampling = f"{samples_per_task} episodes a task {sampling}, success = each task's rate (Avg@{samples_per_task})"
    return sampling


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary as the lines ``agentgym train`` prints under its table."""
    start = summary["start"]
    name = {"sft": "after SFT", "before": "before RL"}[start]
    tasks, lines = summary["tasks"], []
    horizon = f", {summary['horizon']} turns" if summary.get("horizon") else ""
    k = summary.get("samples_per_task", 1)
    sampling = describe_sampling(summary.get("temperature"), k)
    lines.append(f"held-out panel: {tasks} tasks, the same at both ends ({sampling}{horizon})")
    rows = [("", name, "after RL")]
    success = summary["success"]
    rows.append(("success" if k == 1 else f"success (Avg@{k})",
                 *(_count(success[key], tasks) if k == 1 else _rate(success[key]) for key in (start, "after"))))
    invalid = summary["invalid_action_rate"]
    rows.append(("invalid actions (share of turns)", *(_rate(invalid[k]) for k in (start, "after"))))
    seconds = summary.get("eval_seconds") or {}
    if any(seconds.get(key) is not None for key in (start, "after")):
        rows.append(("evaluation time", *("-" if seconds.get(key) is None else format_seconds(seconds[key])
                                          for key in (start, "after"))))
    width = max(len(r[0]) for r in rows)
    lines += [f"  {label:<{width}}  {a:>14}  {b:>14}" for label, a, b in rows]
    paired = summary.get("paired")
    if paired is not None:
        lines.append(f"  RL - {'SFT' if start == 'sft' else 'start'} success: {_points(paired['diff'])}, "
                     f"95% CI {_interval(paired['ci95'])} ({paired['interval']}; {paired['gained']} tasks gained, "
                     f"{paired['lost']} lost" + ("" if paired["mcnemar_p"] is None
                                                else f"; McNemar exact p = {paired['mcnemar_p']:.3g}") + ")")
    updates = summary["updates"]
    if updates["steps"]:
        lines.append(f"  RL updates: {updates['updated']} of {updates['steps']} steps updated the policy "
                     f"({updates['trained_trajectories']} episodes trained; a step whose groups all tie trains none)")
        if "sampled_groups" in updates:
            lines.append(f"  reward signal: {updates['mixed_groups']} of {updates['sampled_groups']} groups had "
                         "differing rewards (the rest tied on the task: all solved or all failed)")
    lines += [f"warning: {w}" for w in summary["warnings"]]
    return "\n".join(lines)


def _points(diff: float) -> str:
    return f"{100 * diff:+.1f} points"


def _interval(ci: list[float]) -> str:
    return f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def _count(rate: float | None, tasks: int) -> str:
    return "-" if rate is None else f"{round(rate * tasks)}/{tasks} ({100 * rate:.1f}%)"


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f}%"
