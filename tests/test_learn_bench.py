"""bench/learn_babyai.py's bookkeeping: environment steps per arm and the arms compared with each other."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "learn_babyai.py"


@pytest.fixture(scope="module")
def learn():
    spec = importlib.util.spec_from_file_location("learn_babyai", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _log(run_dir: Path, rows: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_env_steps_are_cumulative_turns_times_trajectories_and_a_resumed_step_counts_once(learn, tmp_path):
    _log(tmp_path, [
        {"kind": "eval", "step": 0, "turns": 7.0, "tasks": 120},           # evaluations are not training
        {"kind": "train", "step": 1, "turns": 4.0, "trajectories": 32.0},
        {"kind": "train", "step": 2, "turns": 3.5, "trajectories": 32.0},  # logged, then the run was killed
        {"kind": "train", "step": 2, "turns": 3.0, "trajectories": 32.0},  # and resumed: this one stands
        {"kind": "train", "step": 3, "turns": 6.0, "trajectories": 30.0},
    ])
    assert learn.env_steps(tmp_path) == {"1": 128.0, "2": 224.0, "3": 404.0}


def test_headline_compares_every_later_arm_with_the_first_on_the_same_tasks(learn):
    sft = {"a": 0, "b": 0, "c": 1, "d": 0}
    first = {"arm": "scaling_inter", "rl_checkpoint": "x", "eval_sft": {"per_task": sft},
             "eval_after": {"per_task": {"a": 1, "b": 1, "c": 1, "d": 0}}}
    fixed = {"arm": "fixed", "eval_after": {"per_task": {"a": 1, "b": 0, "c": 0, "d": 0}}}
    top = learn.headline([first, fixed])
    assert top["sft_success"] == 0.25 and top["rl_success"] == 0.75
    assert "paired_vs_first_arm" not in first
    versus = fixed["paired_vs_first_arm"]
    assert (versus["before"], versus["after"], versus["gained"], versus["lost"]) == (0.75, 0.25, 0, 2)
    assert fixed["paired_vs_sft"]["diff"] == 0.0  # one gained (a), one lost (c)


def test_the_matched_checkpoint_is_the_saved_step_closest_to_the_first_arms_environment_steps(learn):
    taken = {"4": 1000.0, "8": 2000.0, "12": 3000.0, "16": 4000.0}
    assert learn.closest_checkpoint([16, 4, 8, 12], taken, 2900.0) == 12
    assert learn.closest_checkpoint([4, 8, 12, 16], taken, 2500.0) == 8   # a tie: the earlier one
    assert learn.closest_checkpoint([16], taken, 100.0) == 16


def test_train_seconds_are_cumulative_step_times_and_a_resumed_step_counts_once(learn):
    row = {"train": [{"step": 1, "time_step": 30.0}, {"step": 2, "time_step": 50.0},   # step 2 killed, then
                     {"step": 2, "time_step": 40.0}, {"step": 3, "time_step": None}]}  # resumed; 3: not timed
    assert learn.train_seconds(row) == {"1": 30.0, "2": 70.0, "3": 70.0}


def _arm(tmp_path: Path, name: str, saved: list[int], times: list[float], after: dict) -> dict:
    run_dir = tmp_path / name
    for step in saved:
        (run_dir / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
    train = [{"step": k + 1, "time_step": t, "turns": 4.0, "trajectories": 8.0} for k, t in enumerate(times)]
    return {"arm": name, "config": str(run_dir / "config.yaml"), "train": train, "eval_after": after,
            "env_steps": {str(k + 1): 32.0 * (k + 1) for k in range(len(times))}}


def test_a_later_arm_is_matched_at_equal_wall_time_and_an_evaluated_checkpoint_is_not_played_again(
        learn, tmp_path, monkeypatch):
    first = _arm(tmp_path, "scaling_inter", [4], [10.0, 10.0, 20.0, 25.0], {"per_task": {"a": 1, "b": 0}})
    fixed = _arm(tmp_path, "fixed", [2, 4], [30.0, 30.0, 30.0, 30.0], {"per_task": {"a": 1, "b": 1}})
    at_two = {"per_task": {"a": 0, "b": 0}}
    fixed["at_matched_env_steps"] = {"step": 2, "env_steps": 64.0, "first_arm_env_steps": 128.0, "eval": at_two}

    def refuse(*_args):
        raise AssertionError("checkpoint 2 was evaluated already, for the env-steps match")

    monkeypatch.setattr(learn, "evaluate_checkpoint", refuse)
    learn.match_checkpoints(None, [first, fixed], "train_seconds")  # the first arm's steps took 65 s
    matched = fixed["at_matched_wall_time"]
    assert (matched["step"], matched["train_seconds"], matched["first_arm_train_seconds"]) == (2, 60.0, 65.0)
    assert matched["eval"] is at_two
    assert (matched["paired_vs_first_arm"]["gained"], matched["paired_vs_first_arm"]["lost"]) == (0, 1)

    first["train"][-1]["time_step"] = 100.0   # now 140 s: the fixed arm's last checkpoint, its own evaluation
    learn.match_checkpoints(None, [first, fixed], "train_seconds")
    assert fixed["at_matched_wall_time"]["step"] == 4
    assert fixed["at_matched_wall_time"]["eval"] is fixed["eval_after"]
