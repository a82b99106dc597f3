"""One entry point for every fine-tuning kind, and the warm start of an RL run."""

from __future__ import annotations

from typing import Any

from agentgym_core.finetune.common import FinetuneResult
from agentgym_core.finetune.config import FinetuneConfig
from agentgym_core.plugins import PluginManager

__all__ = ["run_finetune"]


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
