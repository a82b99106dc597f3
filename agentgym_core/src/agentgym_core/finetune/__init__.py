"""Fine-tuning paradigms on the RL trainer's stack: SFT, DPO, rejection sampling, and collection.

    agentgym collect --env babyai --policy expert --n 200 --out runs/babyai_expert.jsonl
    agentgym finetune examples/babyai_sft_cpu.yaml

Same trajectory record (``token_ids``/``loss_mask``), same model loading and LoRA option, same
checkpoint layout and held-out evaluation as :mod:`agentgym_core.rl`; ``run_sft``/``run_dpo``/
``run_rejection_sampling`` each return a :class:`FinetuneResult` whose ``model_path`` an RL run
can start from.
"""

from typing import Any

from agentgym_core.finetune.config import (
    CollectConfig,
    DataConfig,
    DPOOptions,
    FinetuneConfig,
    FinetuneTrainerConfig,
    RejectionOptions,
    SFTOptions,
    load_finetune_config,
    save_finetune_config,
)
from agentgym_core.finetune.data import (
    DataFormatError,
    Example,
    TokenizerChat,
    agenttraj_messages,
    load_examples,
    load_tokenizer,
    tokenize_messages,
)
from agentgym_core.finetune.experts import BUILTIN_EXPERTS, ExpertSpec, NoExpertError, get_expert

__all__ = [
    "BUILTIN_EXPERTS",
    "CollectConfig",
    "DPOOptions",
    "DataConfig",
    "DataFormatError",
    "Example",
    "ExpertSpec",
    "FinetuneConfig",
    "FinetuneTrainerConfig",
    "NoExpertError",
    "RejectionOptions",
    "SFTOptions",
    "TokenizerChat",
    "agenttraj_messages",
    "get_expert",
    "load_examples",
    "load_finetune_config",
    "load_tokenizer",
    "run_dpo",
    "run_finetune",
    "run_rejection_sampling",
    "run_sft",
    "save_finetune_config",
    "tokenize_messages",
]

_LAZY = {
    "run_sft": "agentgym_core.finetune.sft",
    "run_dpo": "agentgym_core.finetune.dpo",
    "run_rejection_sampling": "agentgym_core.finetune.rejection",
    "run_finetune": "agentgym_core.finetune.run",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # the training loops pull in torch and the rollout engine: import on use
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentgym_core.finetune' has no attribute {name!r}")
