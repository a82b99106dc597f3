"""Checkpoints keep every learner rank's RNG state, and loading one puts it back where the rank lives."""

from __future__ import annotations

import torch

from agentgym_core.training.checkpoint import latest_checkpoint, rank_rng_state


def test_each_rank_resumes_its_own_rng_state_and_rank_0s_when_the_rank_count_changed():
    state = {"rng": "rank 0", "rng_by_rank": ["rank 0", "rank 1"]}
    assert [rank_rng_state(state, r, 2) for r in range(2)] == ["rank 0", "rank 1"]
    # Resumed with another trainer.learners, or from a checkpoint written before per-rank states:
    # every rank starts from rank 0's, as every rank of a new run starts from the same seed.
    assert [rank_rng_state(state, r, 3) for r in range(3)] == ["rank 0"] * 3
    assert rank_rng_state({"rng": "rank 0"}, 1, 2) == "rank 0"


def test_learner_load_restores_the_random_stream_the_checkpoint_was_saved_with(tmp_path, tiny_config):
    from agentgym_core.rl.learner import Learner
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    learner = Learner(tiny_config(tmp_path), model, tokenizer=tokenizer)
    torch.manual_seed(5)
    learner.save(tmp_path, 1, tokenizer=tokenizer, extra_state={"step": 1}, keep=1)
    after_save = torch.rand(4)  # what the next update's dropout would draw
    torch.manual_seed(6)  # a restarted process: another stream
    state = learner.load(latest_checkpoint(tmp_path))
    assert torch.equal(torch.rand(4), after_save)
    assert len(state["rng_by_rank"]) == 1 and torch.equal(state["rng_by_rank"][0]["torch"], state["rng"]["torch"])

