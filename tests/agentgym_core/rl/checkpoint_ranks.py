"""Rank bodies of the sharded-checkpoint tests (module level, so spawned ranks can import them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _learner(world_size: int) -> tuple[Any, Any]:
    import torch

    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.distributed import init_from_environment
    from agentgym_core.rl.learner import Learner
    from agentgym_core.testing.tiny_model import tiny_chat_model

    torch.set_num_threads(1)
    from agentgym_core.testing.strict_collectives import install

    install("cuda")  # refuse what NCCL would: a CPU tensor on the device group, objects or barriers there
    ctx = init_from_environment("cpu")
    model, tokenizer = tiny_chat_model(seed=0)
    config = load_config(
        None,
        ["envs=[{name: word}]", f"trainer.learners={world_size}", "algorithm.kl.coef=0", "optim.lr=0.01"],
    )
    return Learner(config, model, tokenizer=tokenizer, ctx=ctx), tokenizer


def _full_state(learner: Any) -> dict[str, Any]:
    """The whole weights and optimizer state by name, on rank 0 (collective)."""
    weights = learner.policy_state_dict()
    return {
        "weights": {k: v.detach().cpu().clone() for k, v in weights.items()},
        "optimizer": learner.optimizer_state(),
    }


def save_after_one_step(world_size: int, run_dir: str) -> None:
    """One AdamW step on a fixed batch, then a checkpoint of step 1; rank 0 keeps the full state it saved."""
    import torch

    learner, tokenizer = _learner(world_size)
    ids = torch.arange(1, 25).reshape(2, 12) % 50
    loss = learner.model(input_ids=ids).logits.float().pow(2).mean()
    loss.backward()
    learner.optimizer.step()
    learner.optimizer.zero_grad()
    learner.save(Path(run_dir), 1, tokenizer=tokenizer, extra_state={"step": 1}, keep=2, hf_weights=False)
    full = _full_state(learner)
    if learner.ctx.is_main:
        torch.save(full, Path(run_dir) / "saved_state.pt")


def resume(world_size: int, run_dir: str, out: str) -> None:
    """A fresh learner of ``world_size`` ranks loads step 1; rank 0 writes the full state it holds then."""
    import torch

    from agentgym_core.training.checkpoint import checkpoint_dir

    learner, _ = _learner(world_size)
    learner.load(checkpoint_dir(run_dir, 1))
    full = _full_state(learner)
    if learner.ctx.is_main:
        torch.save(full, out)
