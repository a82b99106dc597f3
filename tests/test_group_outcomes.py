"""bench/group_outcomes.py: how RL's groups ended, by the turns the expert needs for their task."""

from __future__ import annotations

import json

import pytest


def test_group_outcomes_by_the_experts_turns(bench_script, tmp_path):
    outcomes = bench_script("group_outcomes")
    from agentgym_core.rollout.logs import LOG_FORMAT

    expert = tmp_path / "expert.jsonl"
    expert.write_text("".join(json.dumps({"format": LOG_FORMAT, "env": "babyai", "task_id": t, "success": s,
                                          "turns": [{}] * n}) + "\n"
                              for t, s, n in [(1, True, 1), (2, True, 2), (3, False, 8), (4, True, 6)]))
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    samples = {1: [True, True], 2: [True, False], 3: [False, False], 4: [False, True], 9: [False, False]}
    broken = json.dumps({"env": "babyai", "task_id": 1, "success": False, "failed": True}) + "\n"  # not counted
    (run / "trajectories" / "step_000001.jsonl").write_text(broken + "".join(
        json.dumps({"env": "babyai", "task_id": t, "success": s}) + "\n" for t, ss in samples.items() for s in ss))
    table = outcomes.count_groups([run], outcomes.expert_turns(expert))
    assert list(table) == ["1", "2", "4+", "not played", "unsolved"]
    assert table["1"] == {"all solved": 1, "mixed": 0, "all failed": 0}
    assert table["2"]["mixed"] == table["4+"]["mixed"] == 1
    assert table["unsolved"]["all failed"] == table["not played"]["all failed"] == 1
    with pytest.raises(SystemExit, match="no trajectories"):
        outcomes.count_groups([tmp_path], {})
