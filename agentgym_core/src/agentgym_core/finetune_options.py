"""The fine-tuning sections an RL recipe can carry too (``data``, ``sft``, ``dpo``, ``rejection_sampling``).

It sits outside both :mod:`agentgym_core.rl` and :mod:`agentgym_core.finetune` and imports neither,
so an RL recipe's ``warm_start`` section can be typed without ``rl`` depending on ``finetune``
(``finetune`` builds on ``rl``'s stack, never the reverse).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DPOOptions", "DataConfig", "ExpertDemos", "RejectionOptions", "ReplayOptions", "SFTOptions", "WarmStartConfig",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Section):
    """``data``: the trajectories to learn from (rollout logs, trajectory dumps, AgentTraj files)."""

    paths: list[str] = Field(default_factory=list, description="JSONL files (or AgentTraj JSON lists) to read.")
    only_successful: bool = Field(
        True, description="SFT: keep only successful trajectories (AgentTraj records count as successful)."
    )
    max_tokens: int | None = Field(
        4096, ge=16, description="Drop examples longer than this many tokens (None keeps all)."
    )
    max_examples: int | None = Field(None, ge=1, description="Use at most this many examples (after filtering).")
    env: str | None = Field(None, description="Keep only trajectories of this environment.")


class SFTOptions(_Section):
    """``sft``: supervised fine-tuning, cross-entropy on the policy's own tokens only."""

    epochs: int = Field(2, ge=1, description="Passes over the data.")
    batch_size: int = Field(8, ge=1, description="Sequences per optimizer step.")
    micro_batch_tokens: int = Field(4096, ge=64, description="Tokens per forward/backward (gradients accumulate).")
    packing: bool = Field(True, description="Padding-free packing of sequences (the RL update's forward).")
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="Gradient clipping; None disables it.")
    loss_agg: Literal["token_mean", "seq_mean"] = Field(
        "token_mean", description="token_mean: every trained token weighs the same; seq_mean: every sequence does."
    )


class DPOOptions(_Section):
    """``dpo``: direct preference optimisation on (successful, failed) trajectories of one task."""

    beta: float = Field(0.1, gt=0.0, description="Inverse temperature of the implicit reward (DPO's beta).")
    label_smoothing: float = Field(0.0, ge=0.0, lt=0.5, description="Conservative DPO: assumed label noise.")
    sft_coef: float = Field(0.0, ge=0.0, description="Add this times the chosen trajectory's NLL (RPO-style).")
    epochs: int = Field(1, ge=1, description="Passes over the pairs.")
    batch_pairs: int = Field(4, ge=1, description="Pairs per optimizer step.")
    pairs_per_task: int = Field(4, ge=1, description="Most pairs built from one task's trajectories.")
    micro_batch_tokens: int = Field(4096, ge=64, description="Tokens per forward/backward.")
    packing: bool = Field(True, description="Padding-free packing in the forward.")
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="Gradient clipping; None disables it.")


class RejectionOptions(_Section):
    """``rejection_sampling``: sample K per task, keep the successes, fine-tune, for R rounds."""

    rounds: int = Field(2, ge=1, description="R: sample -> filter -> fine-tune rounds.")
    tasks_per_round: int = Field(32, ge=1, description="Training tasks sampled each round (per environment).")
    samples_per_task: int = Field(4, ge=1, description="K: trajectories sampled per task.")
    keep_per_task: int = Field(1, ge=1, description="Successful trajectories kept per task (fewest turns first).")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature of the collection rollouts.")
    max_turns: int = Field(12, ge=1, description="Turn budget of collection rollouts.")
    accumulate: bool = Field(
        True, description="Train each round on every trajectory kept so far (AgentEvol-style), not only the newest."
    )
    include_data: bool = Field(True, description="Also train on `data.paths` (e.g. expert trajectories) each round.")
    sft: SFTOptions = Field(default_factory=lambda: SFTOptions(epochs=1), description="The fine-tuning of each round.")


class ExpertDemos(_Section):
    """``warm_start.expert``: demonstrations played by an environment's expert policy, collected first."""

    env: str | None = Field(None, description="Environment whose expert plays (None: the recipe's first env).")
    n: int = Field(600, ge=1, description="Training tasks the expert plays (seeded shuffle of the train split).")
    max_turns: int = Field(12, ge=1, description="Turn budget of an expert episode (longer ones are dropped).")
    workers: int = Field(
        1, ge=1, description="Processes the expert plays in, each with its own in-process environment (the "
        "same episodes as one).")
    rl_tasks: Literal["all", "solved"] = Field(
        "all", description="The training tasks RL draws from: 'all' (the env's train split), or 'solved' (the "
        "tasks of these n that the expert solved within RL's final horizon: a task no expert finishes in time "
        "gives GRPO groups that all fail, which teach nothing). With 'solved', n is also RL's task pool.")


class ReplayOptions(_Section):
    """``warm_start.replay``: the warm start's examples kept in every RL update (PPO-ptx, Ouyang et al. 2022).

    Each update adds ``coef`` times the mean negative log-likelihood of ``examples`` warm-start
    examples (a seeded draw per step) to the policy loss, meant to keep RL from unlearning what SFT
    taught on tasks whose groups all succeed or all fail (those carry no GRPO signal). On the BabyAI
    main job it has shown no gain yet (bench/README.md, "The main job").
    """

    coef: float = Field(0.0, ge=0.0, description="Weight of the SFT loss in each RL update (0: no replay).")
    examples: int = Field(8, ge=1, description="Warm-start examples in each update's SFT term.")


class WarmStartConfig(_Section):
    """``warm_start`` of an RL recipe: SFT first (on ``data`` and/or fresh expert demos), then RL from it."""

    data: DataConfig = Field(
        default_factory=DataConfig, description="Trajectories to fine-tune on (e.g. `agentgym collect` logs)."
    )
    expert: ExpertDemos | None = Field(
        None, description="Collect this many expert episodes into the run directory and train on them too."
    )
    sft: SFTOptions = Field(default_factory=SFTOptions, description="SFT settings.")
    lr: float = Field(1e-5, gt=0.0, description="SFT learning rate (the RL recipe's optim.lr is for RL).")
    replay: ReplayOptions = Field(
        default_factory=ReplayOptions, description="Keep training on the SFT examples during RL (off by default).")
    eval_base: bool = Field(
        False, description="Also evaluate the model before SFT (off: a base model that writes no parseable "
        "action only scores 0).")

    @model_validator(mode="after")
    def _needs_data(self) -> WarmStartConfig:
        if not self.data.paths and self.expert is None:
            raise ValueError("warm_start needs data.paths (trajectory files) or expert: {n: ...} (expert demos)")
        return self
