"""Typed configuration of the fine-tuning paradigms: SFT, DPO, rejection sampling, and collection.

A fine-tuning recipe shares its sections with the RL recipe (``model``, ``envs``, ``rollout``,
``optim`` come from :mod:`agentgym_core.rl.config`, unchanged), so the same model loading, LoRA
option, environment servers and evaluation apply; ``kind`` picks the paradigm and its section
(``sft``, ``dpo`` or ``rejection_sampling``) holds its knobs::

    kind: sft
    model: {path: smollm2-135m-instruct}
    data: {paths: [runs/collect-babyai/trajectories.jsonl]}
    envs: [{name: babyai}]          # held-out evaluation before and after
    sft: {epochs: 2, batch_size: 8}
    optim: {lr: 1.0e-5}
    trainer: {run_dir: runs/babyai_sft, eval_tasks: 40}
    runtime: {threads: 2}

Unknown keys are errors naming the closest valid key, as in the RL recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from agentgym_core.finetune_options import DataConfig, DPOOptions, RejectionOptions, SFTOptions, _Section
from agentgym_core.recipes import load_recipe, save_recipe
from agentgym_core.rl.config import (
    EVAL_SAMPLES,
    EVAL_TASKS,
    EnvConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    RuntimeConfig,
    check_eval_samples,
)

__all__ = [
    "CollectConfig",
    "DPOOptions",
    "DataConfig",
    "FinetuneConfig",
    "FinetuneTrainerConfig",
    "RejectionOptions",
    "SFTOptions",
    "load_finetune_config",
    "save_finetune_config",
]

FinetuneKind = Literal["sft", "dpo", "rejection_sampling"]


class FinetuneTrainerConfig(_Section):
    """``trainer``: the run itself (the field names match the RL trainer's where they mean the same)."""

    run_dir: str = Field("runs/finetune", description="Where config, metrics, checkpoints and evaluations go.")
    seed: int = Field(0, description="Seed of data order, sampling and initialisation.")
    eval_tasks: int = EVAL_TASKS
    eval_samples: int = EVAL_SAMPLES
    eval_max_turns: int = Field(12, ge=1, description="Turn budget of evaluation episodes.")
    eval_before: bool = Field(True, description="Evaluate the initial model before training.")
    save_every: int = Field(50, ge=1, description="Checkpoint every N optimizer steps (the last is always saved).")
    keep_checkpoints: int = Field(2, ge=1, description="Most recent checkpoints kept on disk; older ones are deleted.")
    progress: bool = Field(True, description="Show a console progress bar.")
    tensorboard: bool = Field(False, description="Also log to TensorBoard when it is installed.")


class FinetuneConfig(_Section):
    """A fine-tuning run. ``kind`` picks SFT, DPO or rejection sampling; shared sections as in RL."""

    kind: FinetuneKind = Field("sft", description="sft | dpo | rejection_sampling.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy (and the frozen DPO reference).")
    envs: list[EnvConfig] = Field(
        default_factory=list, description="Environments for held-out evaluation (and sampling, rejection_sampling)."
    )
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling and evaluation settings.")
    data: DataConfig = Field(default_factory=DataConfig, description="Trajectories to learn from.")
    sft: SFTOptions = Field(default_factory=SFTOptions, description="SFT settings (kind: sft).")
    dpo: DPOOptions = Field(default_factory=DPOOptions, description="DPO settings (kind: dpo).")
    rejection_sampling: RejectionOptions = Field(
        default_factory=RejectionOptions, description="Rejection-sampling settings (kind: rejection_sampling)."
    )
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-5), description="Optimizer.")
    trainer: FinetuneTrainerConfig = Field(default_factory=FinetuneTrainerConfig, description="Run control.")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, description="Process and memory knobs.")

    @model_validator(mode="after")
    def _needs(self) -> FinetuneConfig:
        if self.kind in ("sft", "dpo") and not self.data.paths:
            raise ValueError(f"kind={self.kind} needs data.paths (trajectory files; write them with `agentgym collect`)")
        if self.kind == "rejection_sampling" and not self.envs:
            raise ValueError("kind=rejection_sampling samples from environments: set envs: [{name: ...}]")
        check_eval_samples(self.trainer.eval_samples, self.rollout.eval_temperature)
        return self


class CollectConfig(_Section):
    """What `agentgym collect` does: play tasks with an expert or a model, write a rollout log."""

    env: str = Field(description="Environment name (see `agentgym envs`).")
    policy: str = Field("expert", description="'expert' (the env's expert policy) or a model: name, .gguf or HF dir.")
    split: str = Field("train", description="Task split to draw tasks from.")
    n: int = Field(100, ge=1, description="Number of tasks.")
    categories: list[str] | None = Field(
        None, description="Only tasks of these catalog categories (BabyAI levels, TextCraft depths, ...).")
    offset: int = Field(0, ge=0, description="Skip the first tasks of the split (after shuffling).")
    shuffle: bool = Field(False, description="Draw tasks in a seeded random order instead of the split's order.")
    samples: int = Field(1, ge=1, description="Trajectories per task (model policy).")
    out: str | None = Field(None, description="Output JSONL (default runs/collect-<env>-<time>/trajectories.jsonl).")
    env_url: str | None = Field(None, description="Play against a running `agentgym serve` instead of in-process.")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="Constructor options of the env class.")
    tokenizer: str = Field(
        "smollm2-135m-instruct",
        description="Expert policy: the model whose chat template tokenises the expert's turns.",
    )
    max_turns: int = Field(30, ge=1, description="Turn budget per trajectory.")
    expert_timeout_s: float = Field(30.0, gt=0, description="Expert policy: wall-clock limit of one episode.")
    workers: int = Field(
        1, ge=1, description="Expert policy: processes playing tasks at once, each with its own in-process "
        "environment (not with env_url); the same episodes in the same order as one process.")
    temperature: float = Field(1.0, ge=0.0, description="Model policy: sampling temperature (0 = greedy).")
    max_new_tokens: int = Field(128, ge=1, description="Model policy: per-turn cap on sampled tokens.")
    max_total_tokens: int = Field(4096, ge=64, description="Model policy: token budget per trajectory.")
    num_envs: int = Field(8, ge=1, description="Environment instances in flight (model policy).")
    backend: str = Field("transformers", description="Model policy: rollout backend.")
    device: str = Field("auto", description="Model policy: 'auto', 'cpu' or 'cuda'.")
    threads: int | None = Field(None, ge=1, description="torch CPU threads.")
    seed: int = Field(0, description="Seed of task order and sampling.")


def load_finetune_config(path: str | Path | None, overrides: list[str] | None = None) -> FinetuneConfig:
    """Read a fine-tuning YAML recipe, apply ``a.b=value`` overrides, validate (errors say the fix)."""
    return load_recipe(FinetuneConfig, path, overrides)


def save_finetune_config(config: FinetuneConfig, path: str | Path) -> None:
    """Write the resolved config (defaults filled in) as YAML."""
    save_recipe(config, path)
