"""Run discovery and the lazy, incremental index of trajectory files."""

from __future__ import annotations

import json

from viewer_runs import trajectories, write_log_run, write_metrics, write_trainer_step

from agentgym_core.viewer import EVAL_STEP, RunIndex, discover_runs


def test_discovers_training_and_eval_runs_under_a_folder(tmp_path):
    write_log_run(tmp_path / "evals" / "a", trajectories(4))
    write_trainer_step(tmp_path / "train", 1, trajectories(4))
    (tmp_path / "train" / "checkpoints" / "step_000001").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    runs = discover_runs(tmp_path)
    assert sorted(runs) == ["evals/a", "train"]
    assert RunIndex(runs["evals/a"]).kind() == "eval"
    assert RunIndex(runs["train"]).kind() == "train"
    # The run directory itself is a run named ".".
    assert list(discover_runs(tmp_path / "train")) == ["."]


def test_both_formats_index_to_the_same_summaries(tmp_path):
    trajs = trajectories(12, seed=3)
    write_log_run(tmp_path / "log", trajs, step=2)
    write_trainer_step(tmp_path / "dump", 2, trajs)
    from_log = RunIndex(tmp_path / "log").summaries(2)
    from_dump = RunIndex(tmp_path / "dump").summaries(2)
    assert from_log == from_dump
    assert [r["success"] for r in from_log] == [t.success for t in trajs]
    assert [r["turns"] for r in from_log] == [t.num_turns for t in trajs]
    assert [r["sampled_tokens"] for r in from_log] == [t.num_sampled_tokens for t in trajs]


def test_index_reads_only_appended_lines_and_waits_for_a_whole_line(tmp_path):
    path = write_log_run(tmp_path, trajectories(3))
    index = RunIndex(tmp_path)
    assert len(index.summaries(EVAL_STEP)) == 3
    step_file = index.step_file(EVAL_STEP)
    indexed = step_file.indexed_bytes
    line = path.read_text().splitlines()[0]
    with path.open("a") as f:  # a writer halfway through a line
        f.write(line[:50])
    assert len(index.summaries(EVAL_STEP)) == 3
    with path.open("a") as f:
        f.write(line[50:] + "\n")
    rows = index.summaries(EVAL_STEP)
    assert len(rows) == 4 and rows[3]["i"] == 3
    assert step_file.offsets[3] == indexed
    assert index.trajectory(EVAL_STEP, 3)["task_id"] == json.loads(line)["task_id"]


def test_a_replaced_file_is_indexed_again(tmp_path):
    write_trainer_step(tmp_path, 1, trajectories(8))
    index = RunIndex(tmp_path)
    assert len(index.summaries(1)) == 8
    write_trainer_step(tmp_path, 1, trajectories(2, seed=9))
    assert len(index.summaries(1)) == 2


def test_metrics_become_series_by_kind(tmp_path):
    write_metrics(tmp_path, 3)
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "kind": "eval", "success": 0.5}) + "\n")
        f.write('{"step": 4, "kind": "tr')  # being written
    series = RunIndex(tmp_path).metrics()
    assert series["train"]["step"] == [1, 2, 3]
    assert series["train"]["kl"] == [0.01, 0.02, 0.03]
    assert series["eval"] == {"step": [3], "success": [0.5]}


def test_steps_are_listed_without_reading_files(tmp_path):
    for step in (1, 2, 10):
        write_trainer_step(tmp_path, step, trajectories(4))
    index = RunIndex(tmp_path)
    steps = index.steps()
    assert [s["step"] for s in steps] == [1, 2, 10]
    assert all("count" not in s for s in steps)  # nothing indexed yet
    index.summaries(2)
    assert [s.get("count") for s in index.steps()] == [None, 4, None]


def test_an_unreadable_line_is_listed_not_fatal(tmp_path):
    path = write_log_run(tmp_path, trajectories(2))
    with path.open("a") as f:
        f.write("{not json\n")
    write_log_run(tmp_path, trajectories(1))  # appends one more good line
    rows = RunIndex(tmp_path).summaries(EVAL_STEP)
    assert len(rows) == 4 and "unreadable JSON line" in rows[2]["error"]
    assert rows[2]["turns"] == 0 and rows[3]["turns"] > 0


def test_thought_and_action_are_split_only_when_marked():
    from agentgym_core.viewer.records import split_thought

    assert split_thought("Thought: need wood.\nAction: get 1 log") == ("need wood.", "get 1 log")
    assert split_thought("get 1 log") == ("", "")
    assert split_thought("Thought: still thinking") == ("still thinking", "")
