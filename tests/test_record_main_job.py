"""bench/record_main_job.py: a run's true memory peak, its groups' reward signal, the actions it chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def record(bench_script):
    return bench_script("record_main_job")


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _trajectory(task: int, success: bool, reward: float, actions: list[str], failed: bool = False) -> dict:
    messages = [{"role": "user", "content": "obs"}]
    for a in actions:
        messages += [{"role": "assistant", "content": f"Thought: ...\nAction: {a}"}, {"role": "user", "content": "obs"}]
    return {"env": "babyai", "task_id": task, "success": success, "outcome_reward": reward, "failed": failed,
            "messages": messages}


def test_the_run_peak_is_the_largest_phase_peak_not_the_last(record, tmp_path):
    _jsonl(tmp_path / "warm_start" / "metrics.jsonl", [{"kind": "train", "step": 1, "peak_rss_gb": 3.9}])
    _jsonl(tmp_path / "metrics.jsonl", [{"kind": "eval", "step": 0, "peak_rss_gb": 3.2},
                                        {"kind": "train", "peak_rss_rollout_gb": 3.0, "peak_rss_update_gb": 4.4},
                                        {"kind": "train", "peak_rss_rollout_gb": 3.5, "peak_rss_update_gb": 3.6},
                                        {"kind": "eval", "step": 2, "peak_rss_gb": 3.7}])
    # each evaluation apart (the one after RL peaked, not the one it started from)
    assert record.phase_peaks(tmp_path) == {"warm_start_peak_rss_gb": 3.9, "eval_step0_peak_rss_gb": 3.2,
                                            "peak_rss_rollout_gb": 3.5, "peak_rss_update_gb": 4.4,
                                            "eval_step2_peak_rss_gb": 3.7, "run": 4.4}


def test_groups_count_differing_rewards_and_successes_apart_and_skip_failed_episodes(record, tmp_path):
    path = tmp_path / "step_000001.jsonl"
    _jsonl(path, [
        _trajectory(1, True, 0.9, ["go to red ball 1"]), _trajectory(1, False, 0.0, ["turn left", "turn left"]),
        _trajectory(2, True, 0.9, ["pickup key 1"]), _trajectory(2, True, 0.7, ["turn right", "pickup key 1"]),
        _trajectory(3, False, 0.0, ["toggle and go through red door 2"]),
        _trajectory(3, True, 0.9, ["toggle"], failed=True),  # the environment broke: not the policy's
    ])
    groups = record.step_groups(path)
    assert (groups["sampled_groups"], groups["mixed_groups"], groups["success_mixed_groups"]) == (3, 2, 1)
    assert groups["action_mix"] == {"turn left": 2, "pickup": 2, "go to": 1, "turn right": 1,
                                    "toggle and go through": 1}


def test_time_report_reads_wall_user_system_and_peak(record, tmp_path):
    report = tmp_path / "time.txt"
    report.write_text("\tUser time (seconds): 6149.20\n\tSystem time (seconds): 514.03\n"
                      "\tElapsed (wall clock) time (h:mm:ss or m:ss): 49:14.74\n"
                      "\tMaximum resident set size (kbytes): 3707928\n")
    assert record.time_report(report) == {"wall_s": pytest.approx(2954.74), "user_s": 6149.2, "system_s": 514.03,
                                          "peak_rss_bytes": 3707928 * 1024}
    report.write_text("\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03\n\tUser time (seconds): 1\n"
                      "\tSystem time (seconds): 1\n\tMaximum resident set size (kbytes): 1\n")
    assert record.time_report(report)["wall_s"] == 3723
    report.write_text("no report here")
    with pytest.raises(ValueError, match="Elapsed"):
        record.time_report(report)
