"""bench/main_job_flips.py: which held-out tasks RL flips across the main job's recorded runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def flips(bench_script):
    return bench_script("main_job_flips")


def _run(path: Path, panel: str, sft: dict[str, int], rl: dict[str, int]) -> Path:
    path.write_text(json.dumps({"panel_hash": panel, "sft_per_task": sft, "rl_per_task": rl}))
    return path


def test_counts_each_tasks_gains_and_losses_over_the_runs_of_one_panel(flips, tmp_path):
    sft = {"babyai:40": 0, "babyai:41": 1, "babyai:81": 1}  # levels 0, 1, 1 (task i is level i % 40)
    paths = [_run(tmp_path / "a.json", "p", sft, {"babyai:40": 1, "babyai:41": 0, "babyai:81": 1}),
             _run(tmp_path / "b.json", "p", sft, {"babyai:40": 1, "babyai:41": 1, "babyai:81": 0}),
             _run(tmp_path / "c.json", "p", sft, {"babyai:40": 0, "babyai:41": 1, "babyai:81": 1}),
             _run(tmp_path / "other.json", "q", sft, {"babyai:40": 0, "babyai:41": 0, "babyai:81": 0})]
    runs = flips.load_runs(paths)
    assert list(runs) == ["a", "b", "c"]  # the run on another panel is left out
    table = flips.flips(runs)
    assert table["babyai:40"] == {"sft": 0, "sft_differs": 0, "gained": 2, "lost": 0}
    assert table["babyai:41"] == {"sft": 1, "sft_differs": 0, "gained": 0, "lost": 1}
    assert table["babyai:81"]["lost"] == 1
    levels = flips.by_level(table)
    first, second = (flips.LEVEL_NAMES[0], flips.LEVEL_NAMES[1])
    assert levels[first] == {"tasks": 1, "sft": 0, "gained": 2, "lost": 0}
    assert levels[second] == {"tasks": 2, "sft": 2, "gained": 0, "lost": 2}


def test_the_recorded_runs_read_and_the_script_writes_its_json(flips, tmp_path, monkeypatch, capsys):
    out = tmp_path / "flips.json"
    monkeypatch.setattr("sys.argv", ["main_job_flips.py", "--out", str(out)])
    flips.main()
    data = json.loads(out.read_text())
    assert len(data["runs"]) >= 2 and len(data["per_task"]) >= 40
    flipped = [r for r in data["per_task"].values() if r["gained"] or r["lost"]]
    assert data["flipped"] == len(flipped)
    assert "tasks ever flipped" in capsys.readouterr().out


def test_each_runs_change_and_their_spread(flips, tmp_path):
    sft = {"babyai:40": 0, "babyai:41": 1, "babyai:42": 0, "babyai:43": 1}
    paths = [_run(tmp_path / "a.json", "p", sft, {"babyai:40": 1, "babyai:41": 1, "babyai:42": 1, "babyai:43": 1}),
             _run(tmp_path / "b.json", "p", sft, {"babyai:40": 1, "babyai:41": 0, "babyai:42": 0, "babyai:43": 1}),
             _run(tmp_path / "c.json", "q", sft, sft)]
    changes = flips.run_changes(flips.load_runs(paths, panel="p"))
    assert changes == {"a": {"gained": 2, "lost": 0, "diff": 0.5}, "b": {"gained": 1, "lost": 1, "diff": 0.0}}
    change = flips.spread([c["diff"] for c in changes.values()])
    assert change["mean"] == pytest.approx(0.25) and change["sd"] == pytest.approx(0.5 ** 0.5 / 2)
    assert (change["min"], change["max"]) == (0.0, 0.5)
    assert flips.spread([0.1])["sd"] == 0.0
    assert list(flips.load_runs(paths, panel="q")) == ["c"]  # a named panel, though not the most common


def test_a_panel_no_run_was_on_is_refused_with_the_panels_there_are(flips, tmp_path):
    paths = [_run(tmp_path / "a.json", "p", {"babyai:40": 0}, {"babyai:40": 1})]
    with pytest.raises(SystemExit, match=r"no run on panel 'x'.*p \(1 run\)"):
        flips.load_runs(paths, panel="x")
