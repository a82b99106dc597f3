"""An evaluation cut short keeps the episodes it logged: resumed on the same weights, it plays only the rest and
reports what an uninterrupted evaluation reports (a kill leaves complete lines and at most one cut short)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym_core.rl.envs import evaluation_log_path
from agentgym_core.rl.trainer import train

# 4 test tasks x 2 samples, sampled: each episode's place in the panel seeds it, so a replayed one would match too,
# and only the logged timings tell a kept episode from a replayed one
EVAL = {"trainer.eval_tasks": 4, "trainer.eval_samples": 2, "rollout.eval_temperature": 1.0}


def _tiny():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(seed=0)


def _evals(run_dir: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [x for x in lines if x["kind"] == "eval"]


def _same_record(a: dict, b: dict) -> None:
    unlike = ("wall_seconds", "peak_rss_gb", "peak_gpu_gb", "kind")  # kind: the log line's, not the result's
    assert {k: v for k, v in a.items() if k not in unlike} == {k: v for k, v in b.items() if k not in unlike}


def _cut(log: Path, keep: int) -> list[str]:
    """The log as a kill after ``keep`` episodes leaves it: those lines, then half of the next."""
    lines = log.read_text().splitlines(keepends=True)
    assert len(lines) == 8 and all(json.loads(x)["evaluation"]["panel_hash"] for x in lines)
    log.write_text("".join(lines[:keep]) + lines[keep][: len(lines[keep]) // 2])
    return lines[:keep]


def test_a_run_resumed_before_its_first_checkpoint_keeps_the_step_0_episodes(tmp_path, pm, tiny_config):
    config = tiny_config(tmp_path / "run", **EVAL)
    model, tokenizer = _tiny()
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer, stop_after=0)
    whole = _evals(tmp_path / "run")
    assert [x["step"] for x in whole] == [0] and whole[0]["tasks"] == 4 and whole[0]["samples_per_task"] == 2
    log = evaluation_log_path(tmp_path / "run", 0)
    kept = _cut(log, 3)
    (tmp_path / "run" / "metrics.jsonl").unlink()  # killed before the evaluation's line was written

    model, tokenizer = _tiny()
    results = train(config, resume=True, plugin_manager=pm, model=model, tokenizer=tokenizer, stop_after=0)
    lines = log.read_text().splitlines(keepends=True)
    assert lines[:3] == kept and len(lines) == 8  # the three kept as they were (timings too), five played
    assert len({(json.loads(x)["task_id"], json.loads(x)["sample_index"]) for x in lines}) == 8
    (again,) = _evals(tmp_path / "run")
    _same_record(again, whole[0])
    _same_record(results["eval_before"], whole[0])


def test_the_final_evaluation_resumes_from_the_last_checkpoint_and_its_line_is_written_once(tmp_path, pm,
                                                                                            tiny_config):
    config = tiny_config(tmp_path / "run", **EVAL, **{"trainer.steps": 1, "trainer.eval_before": "false"})
    model, tokenizer = _tiny()
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    (whole,) = _evals(tmp_path / "run")
    log = evaluation_log_path(tmp_path / "run", 1)
    kept = _cut(log, 5)

    model, tokenizer = _tiny()  # a fresh process: the initial weights, then the step-1 checkpoint
    results = train(config, resume=True, plugin_manager=pm, model=model, tokenizer=tokenizer)
    assert log.read_text().splitlines(keepends=True)[:5] == kept
    (again,) = _evals(tmp_path / "run")  # replaced, not written twice
    _same_record(again, whole)
    _same_record(results["eval_after"], whole)


def test_a_run_that_is_not_resumed_plays_every_episode_again(tmp_path, pm, tiny_config):
    config = tiny_config(tmp_path / "run", **EVAL)
    model, tokenizer = _tiny()
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer, stop_after=0)
    log = evaluation_log_path(tmp_path / "run", 0)
    first = log.read_text().splitlines()
    model, tokenizer = _tiny()
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer, stop_after=0)
    again = log.read_text().splitlines()
    assert len(again) == 8 and not set(first) & set(again)  # new timings on every line: all replayed


def test_resume_with_nothing_to_resume_is_still_refused(tmp_path, pm, tiny_config):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        train(tiny_config(tmp_path / "empty"), resume=True, plugin_manager=pm)
