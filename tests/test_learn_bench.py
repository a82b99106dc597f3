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
