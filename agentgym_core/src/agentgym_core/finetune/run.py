"""One entry point for every fine-tuning kind, and the warm start of an RL run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym_core.finetune.common import FinetuneResult
from agentgym_core.finetune.config import FinetuneConfig
from agentgym_core.plugins import PluginManager

__all__ = ["run_finetune", "warm_start_sft"]


def run_finetune(config: FinetuneConfig, *, resume: bool = False, plugin_manager: PluginManager | None = None,
                 model: Any = None, tokenizer: Any = None) -> FinetuneResult:
    """Run ``config.kind`` (sft | dpo | rejection_sampling); ``result.model_path`` is the trained HF directory.

    As an RL warm start: run it, then set the RL config's ``model.path`` to ``str(result.model_path)``
    (the checkpoint layout is the RL trainer's, LoRA merged into ``model/``).
    """
    kwargs = {"resume": resume, "plugin_manager": plugin_manager, "model": model, "tokenizer": tokenizer}
    if config.kind == "sft":
        from agentgym_core.finetune.sft import run_sft

        return run_sft(config, **kwargs)
    if config.kind == "dpo":
        from agentgym_core.finetune.dpo import run_dpo

        return run_dpo(config, **kwargs)
    from agentgym_core.finetune.rejection import run_rejection_sampling

    return run_rejection_sampling(config, **kwargs)


def warm_start_sft(train_config: Any, *, plugin_manager: PluginManager | None = None,
                   model: Any = None, tokenizer: Any = None) -> Path:
    """SFT before RL: fine-tune ``train_config.model`` on ``train_config.warm_start``; the HF directory to start RL from.

    ``train_config`` is an RL ``TrainConfig`` with a ``warm_start`` section
    (:class:`agentgym_core.finetune.options.WarmStartConfig`). The SFT run lives in
    ``<trainer.run_dir>/warm_start``; when it already finished (a resumed RL run), it is not redone.
    """
    from agentgym_core.finetune.sft import run_sft
    from agentgym_core.rl.checkpoint import latest_checkpoint, load_trainer_state

    warm = train_config.warm_start
    run_dir = Path(train_config.trainer.run_dir) / "warm_start"
    done = latest_checkpoint(run_dir)
    if done is not None and load_trainer_state(done).get("finished"):
        return done / "model"
    config = FinetuneConfig.model_validate({
        "kind": "sft", "model": train_config.model, "data": warm.data, "sft": warm.sft,
        "optim": {"lr": warm.lr}, "trainer": {"run_dir": str(run_dir), "seed": train_config.trainer.seed,
                                              "eval_tasks": 0, "progress": train_config.trainer.progress,
                                              "save_every": 10**9}})
    result = run_sft(config, plugin_manager=plugin_manager, model=model, tokenizer=tokenizer,
                     resume=done is not None)  # a warm start cut short continues
    if result.checkpoint is None:
        raise RuntimeError(f"warm start: SFT in {run_dir} wrote no checkpoint")
    return result.model_path  # type: ignore[return-value]
