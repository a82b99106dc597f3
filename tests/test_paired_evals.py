"""bench/paired_evals.py: two models' `agentgym eval` outputs paired task by task, per panel and together."""

from __future__ import annotations

import json
import sys

import pytest


@pytest.fixture(scope="module")
def paired(bench_script):
    return bench_script("paired_evals")


def _eval_dir(path, results: dict[int, bool]):
    path.mkdir()
    (path / "trajectories.jsonl").write_text(
        "".join(json.dumps({"env": "babyai", "task_id": t, "success": s}) + "\n" for t, s in results.items()))
    return path


def test_each_panel_and_all_of_them_are_paired(paired, tmp_path):
    test_before = _eval_dir(tmp_path / "tb", {1: False, 2: True, 3: False})
    test_after = _eval_dir(tmp_path / "ta", {1: True, 2: True, 3: True})
    held_before = _eval_dir(tmp_path / "hb", {7: True, 8: False})
    held_after = _eval_dir(tmp_path / "ha", {7: False, 8: False})
    result = paired.paired_panels([test_before, held_before], [test_after, held_after])
    first, second = result["panels"]
    assert first["before_per_task"] == {"babyai:1": 0, "babyai:2": 1, "babyai:3": 0}
    assert (first["paired"]["gained"], first["paired"]["lost"]) == (2, 0)
    assert (second["paired"]["gained"], second["paired"]["lost"]) == (0, 1)
    together = result["paired"]
    assert together["n_tasks"] == 5 and (together["gained"], together["lost"]) == (2, 1)
    assert together["diff"] == pytest.approx((2 - 1) / 5)
    assert "2/5 -> 3/5, +20.0 points" in paired.line("all", together)


def test_episodes_the_environment_broke_count_as_failures_and_are_named(paired, tmp_path, monkeypatch, capsys):
    before = _eval_dir(tmp_path / "b", {1: True, 2: True})
    after = tmp_path / "a"
    after.mkdir()
    (after / "trajectories.jsonl").write_text(
        json.dumps({"env": "babyai", "task_id": 1, "success": True}) + "\n"
        + json.dumps({"env": "babyai", "task_id": 2, "success": False, "failed": True}) + "\n")
    panel = paired.paired_panels([before], [after])["panels"][0]
    assert panel["after_per_task"] == {"babyai:1": 1, "babyai:2": 0}
    assert panel["env_failures"] == {"before": [], "after": ["babyai:2"]}
    monkeypatch.setattr(sys, "argv", ["paired_evals.py", "--before", str(before), "--after", str(after), "--what", "x"])
    paired.main()
    assert "0 episodes before and 1 after that the environment broke" in capsys.readouterr().out


def test_mismatched_panels_are_refused(paired, tmp_path):
    before = _eval_dir(tmp_path / "b", {1: False, 2: True})
    other = _eval_dir(tmp_path / "a", {1: True, 3: True})
    with pytest.raises(SystemExit, match="evaluated different tasks"):
        paired.paired_panels([before], [other])
    with pytest.raises(SystemExit, match="one of each per panel"):
        paired.paired_panels([before, before], [other])
    with pytest.raises(SystemExit, match="repeats tasks of an earlier panel"):
        paired.paired_panels([before, before], [before, before])
    twice = tmp_path / "twice"
    twice.mkdir()
    (twice / "trajectories.jsonl").write_text(json.dumps({"env": "babyai", "task_id": 1, "success": True}) + "\n"
                                               + json.dumps({"env": "babyai", "task_id": 1, "success": False}) + "\n")
    with pytest.raises(SystemExit, match="more than once"):
        paired.per_task(twice)


def test_the_script_writes_its_json(paired, tmp_path, monkeypatch, capsys):
    before = _eval_dir(tmp_path / "b", {1: False, 2: True})
    after = _eval_dir(tmp_path / "a", {1: True, 2: True})
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["paired_evals.py", "--before", str(before), "--after", str(after),
                                      "--what", "a check", "--out", str(out)])
    paired.main()
    written = json.loads(out.read_text())
    assert written["what"] == "a check" and written["paired"]["gained"] == 1
    assert "all panels: 1/2 -> 2/2" in capsys.readouterr().out

