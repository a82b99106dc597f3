"""Sharded checkpoints: one torch.distributed.checkpoint file per rank, read back by 1 or 3 ranks
(weights and AdamW state as saved), Hugging Face weights only when asked."""

from __future__ import annotations

import pytest
import torch
from checkpoint_ranks import resume, save_after_one_step

from agentgym_core.rl.distributed import spawn
from agentgym_core.training.checkpoint import checkpoint_dir, is_sharded, load_trainer_state


def _assert_same(got: dict, expected: dict) -> None:
    assert got["weights"].keys() == expected["weights"].keys()
    for k, v in expected["weights"].items():
        torch.testing.assert_close(got["weights"][k], v, atol=0, rtol=0), k
    states, saved = got["optimizer"]["state"], expected["optimizer"]["state"]
    assert states.keys() == saved.keys() and saved
    for name, moments in saved.items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(states[name][key], moments[key], atol=0, rtol=0), (name, key)


@pytest.mark.slow
def test_a_checkpoint_of_two_ranks_is_one_shard_each_and_resumes_on_one_and_on_three(tmp_path):
    run_dir = tmp_path / "run"
    spawn(save_after_one_step, 2, 2, str(run_dir))
    step = checkpoint_dir(run_dir, 1)
    assert is_sharded(step)
    assert sorted(p.name for p in (step / "sharded").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert not (step / "model").exists()  # no full copy unless asked (and for the final checkpoint)
    assert "optimizer_by_name" not in load_trainer_state(step)  # the optimizer is in the shards only
    expected = torch.load(run_dir / "saved_state.pt")

    resume(1, str(run_dir), str(tmp_path / "one.pt"))  # this process: no process group at all
    _assert_same(torch.load(tmp_path / "one.pt"), expected)
    spawn(resume, 3, 3, str(run_dir), str(tmp_path / "three.pt"))
    _assert_same(torch.load(tmp_path / "three.pt"), expected)
