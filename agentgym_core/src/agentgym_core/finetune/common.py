"""What SFT, DPO and rejection sampling share with each other and with the RL trainer.

Model loading (``rl.policy.load_policy``: named model / GGUF / HF dir, LoRA), the optimizer and LR
schedule (``training.optimizer.build_optimizer``), checkpoints (``training.checkpoint``: the same layout, so
an RL run can start from ``<checkpoint>/model``), metrics (``training.tracking.MetricsWriter``) and held-out
evaluation (``rl.envs.evaluate`` over ``rl.envs.open_envs``, the RL trainer's own) are reused
as they are; this module only wires them for the fine-tuning loops.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentgym_core.finetune.config import DataConfig, FinetuneConfig
from agentgym_core.finetune.data import Example
from agentgym_core.models import detach_dequantized_gguf
from agentgym_core.plugins import PluginManager
from agentgym_core.training.checkpoint import (
    latest_checkpoint,
    load_policy_weights,
    load_trainer_state,
    rng_state,
    save_checkpoint,
    set_rng_state,
)

__all__ = ["FinetuneResult", "evaluate_policy", "restore", "save", "select_examples", "sequence_batches", "token_budget_chunks"]


@dataclass
class FinetuneResult:
    """What a fine-tuning run produced."""

    run_dir: Path
    checkpoint: Path | None = None
    steps: int = 0
    eval_before: dict[str, Any] | None = None
    eval_after: dict[str, Any] | None = None
    final: dict[str, float] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def model_path(self) -> Path | None:
        """The trained policy as a Hugging Face directory (``model.path`` of a follow-up RL run)."""
        return self.checkpoint / "model" if self.checkpoint is not None else None


def select_examples(examples: Sequence[Example], data: DataConfig, *, successful: bool | None = None) -> list[Example]:
    """Filter by environment, success and length; cap the count. ``successful=None``: ``data.only_successful``."""
    want_success = data.only_successful if successful is None else successful
    out = [e for e in examples
           if (data.env is None or e.env == data.env)
           and (not want_success or e.success)
           and (data.max_tokens is None or len(e.token_ids) <= data.max_tokens)]
    return out[: data.max_examples] if data.max_examples else out


def sequence_batches(n: int, batch_size: int, step: int, seed: int, label: str) -> list[int]:
    """Indices of the examples of optimizer step ``step``: slices of per-epoch seeded shuffles.

    A pure function of (seed, step), so a resumed run trains on exactly what an uninterrupted
    one would (the RL trainer's ``tasks_for_step``).
    """
    from agentgym_core.rl.batch import tasks_for_step

    return tasks_for_step(list(range(n)), min(batch_size, n), step, seed, label)


def token_budget_chunks(rows: Sequence[int], lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Split ``rows`` into consecutive chunks of at most ``budget`` tokens (a longer row is alone)."""
    chunks: list[list[int]] = [[]]
    used = 0
    for r in rows:
        if chunks[-1] and used + lengths[r] > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(r)
        used += lengths[r]
    return [c for c in chunks if c]


def padded_mask(examples: Sequence[Example]) -> torch.Tensor:
    """(B, T) float mask of the examples' trained tokens, right-padded with zeros."""
    T = max(len(e.token_ids) for e in examples)
    mask = torch.zeros(len(examples), T)
    for i, e in enumerate(examples):
        mask[i, : len(e.loss_mask)] = torch.tensor(e.loss_mask, dtype=torch.float32)
    return mask


@contextlib.contextmanager
def open_evaluation(pm: PluginManager, config: FinetuneConfig, model: Any, tokenizer: Any) -> Iterator[Any]:
    """Yields ``evaluate(step) -> metrics | None`` on the held-out tasks of ``config.envs``.

    The backend wraps the training module itself (no weight copy), as in the RL trainer.
    """
    from agentgym_core.rl.envs import evaluate, make_backend, open_envs
    from agentgym_core.rollout.backend import closing_backend

    if not config.envs or not config.trainer.eval_tasks:
        yield lambda step: None
        return
    backend, shares = make_backend(pm, config, model, tokenizer)  # type: ignore[arg-type]
    with closing_backend(backend), open_envs(pm, config.envs) as envs:
        def run(step: int) -> dict[str, Any]:
            if not shares:
                backend.load_weights(model.state_dict())
            was_training = model.training
            model.eval()
            try:
                return evaluate(backend, envs, config, config.trainer.eval_max_turns, step)  # type: ignore[arg-type]
            finally:
                model.train(was_training)

        yield run


def evaluate_policy(pm: PluginManager, config: FinetuneConfig, model: Any, tokenizer: Any, step: int) -> dict[str, Any] | None:
    """One held-out evaluation of the current weights (None when no env or no eval tasks)."""
    with open_evaluation(pm, config, model, tokenizer) as run:
        return run(step)


def save(run_dir: Path, step: int, *, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer, lr_schedule: Any,
         config: FinetuneConfig, keep: int, finished: bool = False, extra: dict[str, Any] | None = None) -> Path:
    """A checkpoint in the RL trainer's layout (``model/`` is a plain HF directory; LoRA merged)."""
    state = {"step": step, "kind": config.kind, "finished": finished, "optimizer": optimizer.state_dict(),
             "lr_schedule": lr_schedule.state_dict(), "rng": rng_state(), "config": config.model_dump(mode="json"),
             **(extra or {})}
    detach_dequantized_gguf(model)
    return save_checkpoint(run_dir, step, model=model, tokenizer=tokenizer, trainer_state=state, keep=keep)


def restore(run_dir: Path, model: Any, optimizer: torch.optim.Optimizer | None, lr_schedule: Any) -> dict[str, Any]:
    """Load the latest complete checkpoint of ``run_dir`` into the model/optimizer; its trainer state."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"resume: no complete checkpoint under {run_dir}/checkpoints; start without resume")
    load_policy_weights(model, checkpoint)
    state = load_trainer_state(checkpoint)
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if lr_schedule is not None:
        lr_schedule.load_state_dict(state["lr_schedule"])
    set_rng_state(state["rng"])
    return state


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def start_run(config: FinetuneConfig, run_dir: str | Path | None = None) -> Path:
    """What every fine-tuning run does first: create its directory (default ``trainer.run_dir``), seed the RNGs."""
    run_dir = Path(run_dir or config.trainer.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(config.trainer.seed)
    return run_dir
