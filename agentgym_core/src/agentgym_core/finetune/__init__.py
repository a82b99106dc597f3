"""Fine-tuning paradigms on the RL trainer's stack: SFT, DPO, rejection sampling, and collection.

    agentgym collect --env babyai --policy expert --n 300 --shuffle --out runs/babyai_expert.jsonl
    agentgym finetune examples/babyai_sft_cpu.yaml

Same trajectory record (``token_ids``/``loss_mask``), same model loading and LoRA option, same
checkpoint layout and held-out evaluation as :mod:`agentgym_core.rl`; ``run_sft``/``run_dpo``/
``run_rejection_sampling`` each return a :class:`FinetuneResult` whose ``model_path`` an RL run
can start from (``warm_start_sft`` does that for an RL recipe with a ``warm_start`` section).

Every name is imported on first use, so importing one paradigm costs no import of the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "CollectConfig": "config", "FinetuneConfig": "config", "FinetuneTrainerConfig": "config",
    "load_finetune_config": "config", "save_finetune_config": "config",
    "DPOOptions": "agentgym_core.finetune_options", "DataConfig": "agentgym_core.finetune_options",
    "RejectionOptions": "agentgym_core.finetune_options", "SFTOptions": "agentgym_core.finetune_options",
    "WarmStartConfig": "agentgym_core.finetune_options",
    "DataFormatError": "data", "Example": "data", "TokenizerChat": "data", "agenttraj_messages": "data",
    "load_examples": "data", "load_tokenizer": "agentgym_core.models", "tokenize_messages": "data",
    "ExpertSpec": "experts", "NoExpertError": "experts", "get_expert": "experts",
    "CollectResult": "collect", "collect": "collect",
    "FinetuneResult": "common",
    "run_sft": "sft", "sft_loss": "sft", "run_dpo": "dpo", "dpo_loss": "dpo",
    "run_rejection_sampling": "rejection", "keep_successes": "rejection",
    "run_finetune": "run", "warm_start_sft": "run",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        where = _WHERE[name]
        module = where if "." in where else f"agentgym_core.finetune.{where}"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'agentgym_core.finetune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
