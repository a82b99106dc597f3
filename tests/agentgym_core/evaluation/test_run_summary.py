"""The end-of-run summary: the paired change over tasks, the invalid-action rates, the updates, the warnings."""

from __future__ import annotations

import json

import pytest

from agentgym_core.evaluation.run_summary import describe_sampling, format_summary, summarize_run


def _eval(successes: list[int], invalid: float) -> dict:
    per_task = {f"babyai:{1804 + i}": s for i, s in enumerate(successes)}
    return {"tasks": len(successes), "horizon": 8, "success": sum(successes) / len(successes),
            "invalid_action_rate": invalid, "per_task": per_task}


def _steps(*skipped: bool) -> list[dict]:
    return [{"kind": "train", "step": i + 1, "skipped_update": float(s), "trained_trajectories": 0.0 if s else 32.0}
            for i, s in enumerate(skipped)]


def test_an_invalid_action_rise_with_flat_success_is_named():
    # The main job of issue #48: 8/40 after SFT, 9/40 after RL, invalid actions 11% -> 63% of turns.
    sft = _eval([1] * 8 + [0] * 32, 30 / 268)
    rl = _eval([1] * 7 + [0] + [1, 1] + [0] * 30, 153 / 244)
    summary = summarize_run({"eval_sft": sft, "eval_after": rl}, _steps(False, True))
    paired = summary["paired"]
    assert (paired["n_tasks"], paired["gained"], paired["lost"]) == (40, 2, 1)
    assert paired["ci95"][0] < 0 < paired["ci95"][1]
    assert paired["interval"] == "paired t interval over tasks"
    (warning,) = summary["warnings"]
    assert "invalid-action rate rose from 11.2% to 62.7%" in warning and "success did not rise" in warning
    text = format_summary(summary)
    assert "8/40 (20.0%)" in text and "9/40 (22.5%)" in text and "11.2%" in text and "62.7%" in text
    assert "RL - SFT success: +2.5 points, 95% CI [" in text and "2 tasks gained, 1 lost; McNemar exact p = 1)" in text
    assert "1 of 2 steps updated the policy (32 episodes trained" in text
    assert text.splitlines()[-1].startswith("warning: the invalid-action rate rose")


def test_a_real_gain_has_an_interval_above_zero_and_no_warning():
    sft = _eval([1] * 8 + [0] * 32, 0.12)
    rl = _eval([1] * 8 + [1] * 10 + [0] * 22, 0.10)
    summary = summarize_run({"eval_sft": sft, "eval_after": rl}, _steps(False, False))
    paired = summary["paired"]
    assert paired["diff"] == pytest.approx(0.25) and paired["ci95"][0] > 0
    assert paired["mcnemar_p"] == pytest.approx(2 / 1024)
    assert summary["warnings"] == []
    assert summary["invalid_action_rate"] == {"sft": 0.12, "after": 0.10}


def test_success_rates_per_task_get_an_interval_and_no_mcnemar_line():
    # success rates (K samples a task), not flags: McNemar's test of paired 0/1 outcomes does not apply
    sft, rl = _eval([1, 0, 0, 1], 0.0), _eval([1, 0, 0, 1], 0.0)
    sft["per_task"] = {"babyai:1": 0.25, "babyai:2": 0.5, "babyai:3": 1.0, "babyai:4": 0.0}
    rl["per_task"] = {"babyai:1": 0.75, "babyai:2": 0.75, "babyai:3": 1.0, "babyai:4": 0.25}
    for record, rows in ((sft, sft["per_task"]), (rl, rl["per_task"])):  # trainer.eval_samples: 4 at temperature 1
        record.update(samples_per_task=4, temperature=1.0, success=sum(rows.values()) / 4)
    summary = summarize_run({"eval_sft": sft, "eval_after": rl}, _steps(False))
    assert summary["paired"]["diff"] == pytest.approx(0.25) and summary["paired"]["mcnemar_p"] is None
    text = format_summary(summary)
    assert "3 tasks gained, 0 lost)" in text and "McNemar" not in text
    assert "4 tasks, the same at both ends (4 episodes a task sampled at temperature 1, success = each task's " \
           "rate (Avg@4), 8 turns)" in text
    assert "success (Avg@4)" in text and "43.8%" in text and "68.8%" in text and "/4 (" not in text
    # one episode a task, sampled: the header says so instead of "greedy"
    one = summarize_run({"eval_sft": {**_eval([1, 0, 0, 1], 0.0), "temperature": 0.7},
                         "eval_after": {**_eval([1, 1, 0, 1], 0.0), "temperature": 0.7}}, _steps(False))
    assert "(sampled at temperature 0.7, 8 turns)" in format_summary(one) and "3/4 (75.0%)" in format_summary(one)
    assert "(greedy, 8 turns)" in format_summary(summarize_run({"eval_sft": _eval([1, 0], 0.0),
                                                                "eval_after": _eval([1, 1], 0.0)}))


def test_a_small_rise_or_one_that_comes_with_a_real_gain_is_not_a_warning():
    sft = _eval([0] * 40, 0.10)
    assert summarize_run({"eval_sft": sft, "eval_after": _eval([0] * 40, 0.14)}, _steps(False))["warnings"] == []
    gain = _eval([1] * 12 + [0] * 28, 0.30)
    assert summarize_run({"eval_sft": sft, "eval_after": gain}, _steps(False))["warnings"] == []


def test_a_run_whose_updates_never_ran_says_so_and_a_resumed_step_counts_once():
    before = _eval([0, 0, 0, 0], 0.3)
    log = _steps(True, True)
    # step 1 logged, the run killed before its checkpoint, and step 1 run again after the resume: the last row stands
    log.insert(0, {"kind": "train", "step": 1, "skipped_update": 0.0, "trained_trajectories": 8.0})
    log.append({"kind": "eval", "step": 2, "success": 0.0})
    summary = summarize_run({"eval_before": before, "eval_after": _eval([0, 0, 0, 0], 0.3)}, log)
    assert summary["start"] == "before" and summary["updates"] == {"steps": 2, "updated": 0, "trained_trajectories": 0}
    (warning,) = summary["warnings"]
    assert warning.startswith("no RL step updated the policy")
    assert "RL - start success: +0.0 points" in format_summary(summary)


def test_agentgym_train_prints_the_summary_and_writes_it_to_the_run_directory(tmp_path):
    from agentgym_core.commands.train import _run_summary

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _steps(False, False)))
    text = _run_summary({"eval_sft": _eval([0, 1, 0, 0], 0.1), "eval_after": _eval([1, 1, 0, 0], 0.05)}, tmp_path)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["paired"]["gained"] == 1 and written["updates"]["updated"] == 2
    assert "2 of 2 steps updated the policy" in text


def test_a_one_task_panel_gives_both_rates_and_no_interval():
    """A panel of one task (a shrunk recipe, `trainer.eval_tasks=1`) has no paired interval; the run still ends."""
    summary = summarize_run({"eval_sft": _eval([0], 0.5), "eval_after": _eval([1], 0.0)}, _steps(False))
    assert summary["paired"] is None
    text = format_summary(summary)
    assert "0/1" in text and "1/1" in text and "95% CI" not in text


def _signal_steps(*mixed: int, groups: int = 8) -> list[dict]:
    return [{"kind": "train", "step": i + 1, "skipped_update": 0.0, "trained_trajectories": 32.0,
             "mixed_groups": float(m), "sampled_groups": float(groups)} for i, m in enumerate(mixed)]


def test_a_run_with_little_reward_signal_says_how_little():
    # The main job's steps of 2026-11-28: 1, 0 and 2 of 8 groups had a success and a failure.
    sft, rl = _eval([1] * 8 + [0] * 32, 0.11), _eval([1] * 9 + [0] * 31, 0.09)
    summary = summarize_run({"eval_sft": sft, "eval_after": rl}, _signal_steps(1, 0, 2))
    assert (summary["updates"]["mixed_groups"], summary["updates"]["sampled_groups"]) == (3, 24)
    (warning,) = summary["warnings"]
    assert warning.startswith("only 3 of 24 groups had differing rewards")
    text = format_summary(summary)
    assert "reward signal: 3 of 24 groups had differing rewards" in text
    assert text.splitlines()[-1] == f"warning: {warning}"


def test_enough_signal_a_real_gain_or_an_old_log_gives_no_signal_warning():
    sft, flat = _eval([1] * 8 + [0] * 32, 0.11), _eval([1] * 8 + [0] * 32, 0.11)
    assert summarize_run({"eval_sft": sft, "eval_after": flat}, _signal_steps(2, 2, 2))["warnings"] == []  # 6 of 24
    gain = _eval([1] * 8 + [1] * 10 + [0] * 22, 0.10)
    assert summarize_run({"eval_sft": sft, "eval_after": gain}, _signal_steps(0, 1))["warnings"] == []
    old = summarize_run({"eval_sft": sft, "eval_after": flat}, _steps(False, False))  # logged before the count
    assert "sampled_groups" not in old["updates"] and old["warnings"] == []
    assert "reward signal" not in format_summary(old)


def test_a_fall_in_success_is_named_even_when_actions_stay_valid():
    # The bf16 main job of 2026-11-28: 8/40 -> 2/40 (0 gained, 6 lost) while invalid actions went to 0%:
    # the policy learned to turn in place, which BabyAI never refuses.
    sft, rl = _eval([1] * 8 + [0] * 32, 0.112), _eval([1, 1] + [0] * 38, 0.0)
    summary = summarize_run({"eval_sft": sft, "eval_after": rl}, _signal_steps(1, 1, 2, 0, 1, 2, 2, 1))
    fell, little = summary["warnings"]
    assert fell.startswith("held-out success fell (-15.0 points, 95% CI [-26.7, -3.3]; 6 tasks lost, 0 gained): "
                           "RL left the policy worse than it was after SFT")
    assert little.startswith("only 10 of 64 groups had differing rewards")
    flat = summarize_run({"eval_sft": sft, "eval_after": _eval([1] * 7 + [0] * 33, 0.1)}, _steps(False))
    assert flat["warnings"] == []  # one task lost: inside the noise, nothing to name


def test_evaluations_of_different_panels_are_not_paired_and_the_summary_says_so():
    sft = {**_eval([1, 0, 0, 1], 0.0), "panel_hash": "aaaa"}
    rl = {**_eval([1, 1, 0, 1], 0.0), "panel_hash": "bbbb"}
    summary = summarize_run({"eval_sft": sft, "eval_after": rl}, _steps(False))
    assert summary["paired"] is None and summary["success"] == {"sft": 0.5, "after": 0.75}
    assert summary["warnings"][0].startswith("the evaluations at the two ends played different panels (hashes aaaa")
    assert "RL - SFT success" not in format_summary(summary)
    rl["panel_hash"] = "aaaa"
    assert summarize_run({"eval_sft": sft, "eval_after": rl}, _steps(False))["paired"]["gained"] == 1


def test_the_sampling_is_named_as_the_run_played_it():
    assert describe_sampling(0.0) == describe_sampling(None) == "greedy"
    assert describe_sampling(0.7) == "sampled at temperature 0.7"
    assert describe_sampling(1.0, 4) == "4 episodes a task sampled at temperature 1, success = each task's rate (Avg@4)"


def test_each_evaluation_says_how_long_it_took_and_old_logs_leave_the_row_out():
    sft, rl = _eval([1, 0, 0, 1], 0.0), _eval([1, 1, 0, 1], 0.0)
    sft["wall_seconds"], rl["wall_seconds"] = 107.4, 486.0  # 1:47 greedy, 8:06 with four samples a task
    summary = summarize_run({"eval_sft": sft, "eval_after": rl}, _steps(False))
    assert summary["eval_seconds"] == {"sft": 107.4, "after": 486.0}
    (row,) = [line for line in format_summary(summary).splitlines() if "evaluation time" in line]
    assert row.split()[-2:] == ["1:47", "8:06"]
    rl["wall_seconds"] = 3725.0  # past an hour: hours shown
    assert format_summary(summarize_run({"eval_sft": sft, "eval_after": rl}, [])).count("1:02:05") == 1
    del sft["wall_seconds"], rl["wall_seconds"]  # a log from before the record had it
    assert "evaluation time" not in format_summary(summarize_run({"eval_sft": sft, "eval_after": rl}, []))
