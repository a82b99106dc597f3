"""The optimizer-step loop that SFT and DPO share.

Both take a fixed number of optimizer steps, each on a batch chosen from the step number alone
(seeded per-epoch shuffles, so a resumed run trains on what an uninterrupted one would). Only the
update differs (:func:`agentgym_core.finetune.sft.sft_update`, DPO's ``_dpo_update``); the caller
passes it in as ``train_step``. Around it, in order: the optimizer and LR schedule, the restore on
resume, the saved config, metrics, held-out evaluation before training, the steps with a progress
bar and a checkpoint every ``trainer.save_every`` steps, held-out evaluation after training.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from agentgym_core.finetune.common import FinetuneResult, open_evaluation, restore, save
from agentgym_core.finetune.config import FinetuneConfig, save_finetune_config
from agentgym_core.plugins import PluginManager
from agentgym_core.rl.forward import mixed_precision
from agentgym_core.training.memory import HeapTrimmer, PhasePeak, release_memory
from agentgym_core.training.optimizer_on_disk import OptimizerStateOnDisk
from agentgym_core.training.tracking import MetricsWriter

__all__ = ["TrainStep", "train_steps"]

#: One optimizer step: ``(step, optimizer) -> metrics``; picks its batch from ``step``, updates the weights.
TrainStep = Callable[[int, torch.optim.Optimizer], dict[str, float]]


def _show_loss(metrics: dict[str, float]) -> dict[str, str]:
    return {"loss": f"{metrics['loss']:.3f}"}


def train_steps(
    pm: PluginManager,
    config: FinetuneConfig,
    *,
    model: Any,
    tokenizer: Any,
    run_dir: Path,
    total_steps: int,
    train_step: TrainStep,
    label: str,
    resume: bool = False,
    stop_after: int | None = None,
    evaluate: bool = True,
    checkpoint: bool = True,
    postfix: Callable[[dict[str, float]], dict[str, str]] = _show_loss,
) -> FinetuneResult:
    """Run ``train_step`` for steps ``start .. total_steps - 1``; evaluate before and after; checkpoint.

    ``start`` is 0, or with ``resume`` the step of ``run_dir``'s latest checkpoint (weights,
    optimizer, LR schedule and RNG restored from it). ``stop_after`` ends after that many steps of
    this call, as a kill would. ``evaluate=False`` skips both held-out evaluations and
    ``checkpoint=False`` every checkpoint. ``label`` names the progress bar; ``postfix`` turns a
    step's metrics into what the bar shows.
    """
    from agentgym_core.training.optimizer import build_optimizer

    # ---- optimizer, resume, the run's config and metrics files ---------------------------------------
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer, lr_schedule = build_optimizer(params, [], config.optim, total_steps)
    start = int(restore(run_dir, model, optimizer, lr_schedule)["step"]) if resume else 0
    on_disk = None  # AdamW's moments in a file except inside optimizer.step()
    if config.runtime.optimizer_state_to_disk:
        on_disk = OptimizerStateOnDisk.in_run_dir(optimizer, run_dir)
        on_disk.store()  # a resumed run's state goes out until the first step
    save_finetune_config(config, run_dir / "config.yaml")
    writer = MetricsWriter(run_dir, tensorboard=config.trainer.tensorboard, resume_step=start if resume else None)
    result = FinetuneResult(run_dir=run_dir, steps=start)

    with HeapTrimmer(config.runtime.heap_trim_interval_s), open_evaluation(pm, config, model, tokenizer) as evaluate_held_out:
        def evaluate_now(step: int) -> dict[str, Any] | None:  # with the evaluation's peak resident memory
            with PhasePeak() as peak:
                found = evaluate_held_out(step)
            return None if found is None else {**found, **peak.as_metrics()}

        # ---- evaluation before training --------------------------------------------------------------
        if evaluate and config.trainer.eval_before and start == 0:
            result.eval_before = evaluate_now(0)
            if result.eval_before is not None:
                writer.write(0, result.eval_before, kind="eval")

        # ---- optimizer steps -------------------------------------------------------------------------
        last = total_steps if stop_after is None else min(total_steps, start + stop_after)
        bar = tqdm(range(start, last), initial=start, total=total_steps, desc=label,
                   disable=not config.trainer.progress, dynamic_ncols=True)
        peak = PhasePeak().start()  # each step logs the peak resident memory of the steps so far
        for step in bar:
            t0 = time.perf_counter()
            with mixed_precision(config.model.mixed_precision, model, cache=config.runtime.autocast_cache):
                metrics = train_step(step, optimizer)
            lr_schedule.step()
            release_memory()  # the step's activations and logits: freed heap pages go back before the next
            peak.stop()
            metrics.update(lr=lr_schedule.get_last_lr()[0], time_step=time.perf_counter() - t0, **peak.as_metrics())
            done = step + 1
            writer.write(done, metrics)
            bar.set_postfix(**postfix(metrics))
            result.final, result.steps = metrics, done
            if checkpoint and (done % config.trainer.save_every == 0 or done == total_steps):
                with on_disk.paused() if on_disk is not None else contextlib.nullcontext():
                    result.checkpoint = save(run_dir, done, model=model, tokenizer=tokenizer, optimizer=optimizer,
                                             lr_schedule=lr_schedule, config=config,
                                             keep=config.trainer.keep_checkpoints, finished=done == total_steps)
                if on_disk is not None:
                    on_disk.store()  # the file still holds it: nothing written
        bar.close()
        # The optimizer is done (its state is in the checkpoint): AdamW's moments, twice the trainable
        # weights in float32, are not held through the evaluation below, nor afterwards until the
        # garbage collector breaks the optimizer <-> LR schedule reference cycle (an RL run after a
        # warm start would carry them into its rollouts).
        if on_disk is not None:
            on_disk.close()  # the file goes, without being read back
        optimizer.state.clear()
        release_memory()

        # ---- evaluation after training ---------------------------------------------------------------
        if evaluate and result.steps == total_steps:
            result.eval_after = evaluate_now(total_steps)
            if result.eval_after is not None:
                writer.write(total_steps, result.eval_after, kind="eval")
    writer.close()
    return result
