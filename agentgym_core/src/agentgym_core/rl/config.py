"""The training run's typed configuration: YAML file + dotted command-line overrides.

    config = load_config("examples/babyai_grpo_cpu.yaml", ["algorithm.kl.coef=0.01", "trainer.steps=5"])

A recipe states ``model``, ``envs``, ``rollout``, ``algorithm``, ``optim`` and ``trainer`` (and
``warm_start`` when it fine-tunes first); keys set only when needed are folded into
``trainer.ray`` (the Ray launcher) and ``runtime`` (process and memory knobs). Every section is a
pydantic model with ``extra="forbid"``; an unknown key is an error that names the closest valid
key. Reading, old keys and overrides are :mod:`agentgym_core.recipes`, shared with fine-tuning. The
resolved config (defaults filled in) is saved in the run directory as ``config.yaml``, and
``--resume`` reads it back from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator, model_validator

import agentgym_core.rl.packing_support as packing
from agentgym_core.finetune_options import WarmStartConfig
from agentgym_core.recipes import ConfigError, load_recipe, save_recipe
from agentgym_core.rl.estimator_api import AdvantageConfig, Estimator, min_group_size
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.schedulers import RoundsConfig

__all__ = [
    "ActorResources",
    "Aggregation",
    "AlgorithmConfig",
    "CriticConfig",
    "CurriculumConfig",
    "DynamicSamplingConfig",
    "EnvConfig",
    "KLConfig",
    "KLEstimator",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "RayConfig",
    "RolloutConfig",
    "RuntimeConfig",
    "TrainConfig",
    "TrainerConfig",
    "check_eval_samples",
    "check_group_size",
    "load_config",
    "save_config",
]


# The loss settings a recipe names (rl.losses implements them); kept here so that the schema loads without torch.
Aggregation = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
KLEstimator = Literal["k1", "k2", "k3", "low_var_kl"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoraConfig(_Section):
    """``model.lora``: train low-rank adapters (peft) instead of all weights; a rollout side with its own copy
    (several ranks, asynchronous rollouts) receives only the adapters after each update."""

    enabled: bool = Field(False, description="Train LoRA adapters only; the base weights stay frozen.")
    r: int = Field(16, ge=1, description="Adapter rank.")
    alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapter input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="Names of the linear layers that get adapters.",
    )


class ModelConfig(_Section):
    """``model``: the policy.

    ``mixed_precision`` runs the training matmuls in bf16 while weights and optimizer state keep
    their dtype; old log-probs are recomputed under the same autocast, so PPO ratios stay
    consistent, and sampling is unaffected. ``gradient_checkpointing_above_tokens: N`` keeps the
    activations of forwards of at most N tokens (faster, memory in proportion to N); set the
    micro-batch sizes (``sft.micro_batch_tokens``, ``algorithm.micro_batch_tokens``) to N so that
    short sequences fill such forwards. bench/README.md measures both.
    """

    path: str = Field("smollm2-135m-instruct", description="Named model, .gguf file or HF model directory.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Training dtype.")
    device: str = Field("auto", description="'auto' (CUDA if present, else CPU), 'cpu', 'cuda', 'cuda:1'.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    gradient_checkpointing_above_tokens: int | None = Field(
        None, ge=1, description="With gradient_checkpointing, recompute activations only in training "
        "forwards of more than N tokens (None: in every forward).")
    lean_activations: bool = Field(
        True, description="Llama-shaped models (Llama, Qwen2/3, Mistral): RMS norms and SiLU-gated MLPs that "
        "keep less for backward, with the same forward numbers (agentgym_core.training.lean_activations).")
    mixed_precision: Literal["no", "bf16", "auto"] = Field(
        "no", description="Run training forwards and backwards under bfloat16 autocast ('auto': where the "
        "device has native bf16).",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="Optional LoRA adapters.")

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _yaml_no_is_no(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `no` (in a recipe or a `model.mixed_precision=no` override) as false
        return "no" if value is False else value

    def check_present(self) -> None:
        """Raise :class:`~agentgym_core.models.ModelNotFoundError` (its message says the fix) when ``path`` names
        no model on this machine. A run checks it before its first phase, so a missing model fails once, in one
        line, not after a warm start's demonstrations or in each of N spawned ranks; torch is not imported."""
        from agentgym_core.models import resolve_model

        resolve_model(self.path)

    @model_validator(mode="after")
    def _threshold_needs_checkpointing(self) -> ModelConfig:
        if self.gradient_checkpointing_above_tokens is not None and not self.gradient_checkpointing:
            raise ValueError("model.gradient_checkpointing_above_tokens limits gradient checkpointing to long "
                             "forwards: set model.gradient_checkpointing: true as well, or drop the threshold")
        return self


class RuntimeConfig(_Section):
    """``runtime``: process and memory knobs of the processes that hold a model (bench/README.md measures them)."""

    threads: int | None = Field(
        None, ge=1, description="torch CPU threads per process (None: half the CPUs under `agentgym`, or "
        "$OMP_NUM_THREADS).")
    onednn_primitive_cache: int | None = Field(
        None, ge=1, description="Most compiled oneDNN kernels a process keeps, in oneDNN's cache and in PyTorch's "
        "(sets ONEDNN_PRIMITIVE_CACHE_CAPACITY and LRU_CACHE_CAPACITY, each unless it is set; None: the defaults).")
    heap_trim_interval_s: float | None = Field(
        1.0, ge=0.0, description="Seconds between returns of the C heap's free pages to the OS while a phase runs "
        "(0 or None: only between phases; else at least 0.05).")
    autocast_cache: bool = Field(
        True, description="Under bf16 autocast, keep each weight's bf16 cast for the whole optimizer step instead of "
        "casting it at every use.")
    optimizer_state_to_disk: bool = Field(
        False, description="Keep the optimizer's state in a file in run_dir outside each optimizer step (one learner "
        "process only).")

    @field_validator("heap_trim_interval_s")
    @classmethod
    def _trim_not_continuously(cls, value: float | None) -> float | None:
        if value and value < 0.05:
            raise ValueError(f"{value} s would trim almost continuously: use 0 (off) or at least 0.05")
        return value


class EnvConfig(_Section):
    """One entry of ``envs``: an environment and where it runs.

    With ``urls`` (an env pool) each new instance goes to the healthy server with the fewest of the
    run's live instances; a server that stops answering is marked down and asked again after
    ``probe_interval_s``; the episodes it broke count as failed (``infra_failed``) and are re-run
    (``rollout.rerun_failed``). Every server must serve the same env and task catalog.
    """

    name: str = Field(description="Registered environment name (`agentgym envs` lists them).")
    url: str | None = Field(
        None, description="Base URL of a running `agentgym serve` for it; None (and no urls) starts one on loopback "
        "for the run.",
    )
    urls: list[str] | None = Field(
        None, description="Several servers of this environment (an env pool), used instead of url.",
    )
    probe_interval_s: float = Field(
        5.0, gt=0, description="Seconds a server of urls that stopped answering is left alone before its /health is "
        "asked again (an answer brings it back).",
    )
    protocol: Literal["agentgym", "openenv"] = Field(
        "agentgym", description="What the servers at url/urls speak: 'agentgym' (`agentgym serve`), or 'openenv' (an "
        "OpenEnv server; task i is the episode reset with seed i, env_kwargs as agentgym_core.http.openenv_remote).")
    env_kwargs: dict[str, Any] = Field(default_factory=dict, description="Constructor arguments of the env class.")
    action_format: Literal["text", "tool_call"] = Field(
        "text", description="How replies carry actions: an `Action:` line, or a call of the `act` tool "
        "(agentgym_core.rollout.tool_calls; native chat-template tools where the template renders them).")
    weight: float = Field(1.0, gt=0, description="Share of each step's tasks drawn from this environment.")
    train_split: str = Field("train", description="Catalog split sampled for training.")
    test_split: str = Field("test", description="Catalog split used for evaluation.")
    train_tasks: list[int] | None = Field(None, description="Restrict training to these task ids.")
    test_tasks: list[int] | None = Field(None, description="Restrict evaluation to these task ids.")
    categories: list[str] | None = Field(
        None, description="Only these categories of the env's catalog (BabyAI levels, TextCraft depths, ...): "
        "training, evaluation and the warm start's expert demos draw their tasks from them.")
    max_concurrency: int = Field(16, ge=1, description="Most live episodes of this environment at once (over all "
                                 "its servers).")

    @model_validator(mode="after")
    def _one_way_to_name_servers(self) -> EnvConfig:
        if self.url is not None and self.urls is not None:
            raise ValueError(f"envs entry {self.name!r} sets both url and urls; keep one (urls: [a, b] for several "
                             "servers, url: a for one)")
        if self.urls is not None:
            if not self.urls:
                raise ValueError(f"envs entry {self.name!r}: urls is empty; list at least one server, or drop the key "
                                 "to start one on loopback")
            stripped = [u.rstrip("/") for u in self.urls]
            repeated = sorted({u for u in stripped if stripped.count(u) > 1})
            if repeated:
                raise ValueError(f"envs entry {self.name!r}: urls lists {repeated[0]} more than once; each server once")
        return self

    @model_validator(mode="after")
    def _categories_listed_once(self) -> EnvConfig:
        if self.categories is not None:
            if not self.categories:
                raise ValueError(f"envs entry {self.name!r}: categories is empty; list at least one, or drop the key "
                                 "to use every category")
            repeated = sorted({c for c in self.categories if self.categories.count(c) > 1})
            if repeated:
                raise ValueError(f"envs entry {self.name!r}: categories lists {repeated[0]!r} more than once")
        return self

    @model_validator(mode="after")
    def _openenv_needs_a_server(self) -> EnvConfig:
        if self.protocol == "openenv" and self.url is None and self.urls is None:
            raise ValueError(f"envs entry {self.name!r} has protocol: openenv but no url; give the OpenEnv server's "
                             "url (or urls)")
        return self

    @property
    def server_urls(self) -> list[str]:
        """The servers to use: ``urls``, or ``[url]``; empty when the run starts its own."""
        return list(self.urls) if self.urls is not None else [self.url] if self.url is not None else []


class DynamicSamplingConfig(_Section):
    """``rollout.dynamic_sampling``: sample more tasks until the step has signal (DAPO's dynamic sampling).

    A group whose samples all got the same reward has zero advantage under GRPO/RLOO/GiGPO: it costs
    rollout time and teaches nothing. With ``min_mixed_groups > 0`` a step samples rounds of
    ``rollout.tasks_per_step`` fresh tasks until that many groups have differing rewards (or
    ``max_rounds`` is reached), and trains on the groups with differing rewards only. Yu et al. 2025
    (DAPO, arXiv:2503.14476) keep sampling until the batch is full; ``max_rounds`` bounds the cost.
    """

    min_mixed_groups: int = Field(
        0, ge=0, description="Groups with differing rewards a step needs before it stops sampling (0: off; "
        "every sampled group is trained, tied ones included).")
    max_rounds: int = Field(3, ge=1, description="Most sampling rounds of rollout.tasks_per_step tasks in one step.")


class CurriculumConfig(_Section):
    """``rollout.curriculum``: favour task categories whose groups are likely to have mixed outcomes.

    A group of ``group_size`` samples carries a group-relative signal only when its outcomes differ.
    With ``kind: pass_rate`` each step draws its tasks' categories (BabyAI's levels, TextCraft's
    depths, ...) in proportion to the probability that a group of them is mixed, estimated from the
    category's recent pass rate, and takes the tasks within a category from its own shuffle. Tasks
    without a category share one. See :mod:`agentgym_core.rl.curriculum`.
    """

    kind: Literal["none", "pass_rate"] = Field(
        "none", description="'none': every task once per epoch in shuffled order; 'pass_rate': categories "
        "drawn by their chance of a mixed group.")
    decay: float = Field(
        0.9, gt=0.0, le=1.0, description="Factor on a category's counts after each step (1.0: never forget).")
    floor: float = Field(
        0.05, gt=0.0, le=1.0, description="Least weight of a category, so one that is always or never solved is "
        "still drawn now and then and its estimate can change.")


class RolloutConfig(_Section):
    """``rollout``: how trajectories are sampled.

    An episode the environment broke (a dead server, an env error, a call past ``env_timeout_s``)
    stays in the step's trajectories, counted in ``infra_failed`` and left out of the loss; a re-run
    (``rerun_failed``) takes its place in the group. With ``max_staleness: k > 0`` the rollout side
    samples the next steps' batches while the learner updates, never more than k versions ahead of
    the weights it holds; each trajectory records its ``policy_version`` and the lag is logged
    (``staleness_mean``, ``staleness_max``).
    """

    tasks_per_step: int = Field(8, ge=1, description="Distinct tasks per training step (all envs together).")
    group_size: int = Field(4, ge=1, description="Samples per task (the GRPO/RLOO group).")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature (log-probs refer to it).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(128, ge=1, description="Per-turn cap on sampled tokens.")
    max_total_tokens: int = Field(4096, ge=16, description="Token budget of a whole trajectory.")
    backend: str = Field("transformers", description="Registered rollout backend name.")
    backend_options: dict[str, Any] = Field(
        default_factory=dict, description="Extra options of the backend (e.g. max_batch_size)."
    )
    sync_check_tolerance: float | None = Field(
        0.1, gt=0.0, description="After each weight sync to a backend with its own copy, stop the run when its "
        "log-probs of a fixed probe differ from the learner's by more than this (mean nats per token); None: no check.",
    )
    end_on_invalid_action: bool = Field(
        False, description="End a training episode at the first action the environment refuses (it keeps the "
        "reward earned so far: usually a failure); evaluation plays on. Every episode RL reinforces is then free "
        "of refused actions, with no penalty weight to trade against success.")
    constrain_actions: bool = Field(
        False, description="Sample each reply's action from the environment's available actions alone: once a reply "
        "has written 'Action:', only tokens that continue a listed action may follow, then the end of the reply. "
        "Training and evaluation alike. Evaluations also give a reply that does not write 'Action:' the marker, "
        "so none is refused; training refuses it instead, so that RL learns to write it. Needs environments that list their "
        "actions and a backend that declares it (transformers' own decode engine).")
    eval_temperature: float = Field(0.0, ge=0.0, description="Temperature at evaluation (0 = greedy).")
    dynamic_sampling: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig, description="Sample more tasks until enough groups have signal.")
    curriculum: CurriculumConfig = Field(
        default_factory=CurriculumConfig, description="Draw tasks by category, favouring those with mixed outcomes.")
    env_timeout_s: float = Field(
        600.0, gt=0.0, description="Seconds one environment call may take before its trajectory fails as an "
        "infrastructure failure.",
    )
    rerun_failed: int = Field(
        1, ge=0, description="Times an episode the environment broke is sampled again within the same step "
        "(0: never).",
    )
    max_env_failure_rate: float = Field(
        0.5, ge=0.0, le=1.0, description="Stop the run when more than this share of a step's episodes broke by an "
        "env error or timeout in every attempt (naming the env, the server and the error); 1 never stops.",
    )
    max_staleness: int = Field(
        0, ge=0, description="Most policy versions a trained trajectory may lag behind the learner (0: "
        "synchronous rollouts).",
    )

    @model_validator(mode="after")
    def _curriculum_needs_synchronous_rollouts(self) -> RolloutConfig:
        if self.curriculum.kind != "none" and self.max_staleness > 0:
            raise ValueError(
                f"rollout.curriculum.kind={self.curriculum.kind} needs rollout.max_staleness=0: with asynchronous "
                f"rollouts (max_staleness={self.max_staleness}) a step's tasks would be drawn before the outcomes "
                "of the steps just before it are counted, at a point that depends on timing, so a resumed run "
                "could draw other tasks. Set rollout.max_staleness=0, or rollout.curriculum.kind=none")
        return self

    def train_sampling(self) -> SamplingParams:
        """How training rollouts sample: ``temperature``, ``top_p``, the per-turn cap and ``constrain_actions``
        without its guarantee (a reply that never writes 'Action:' is refused, and so learnt against:
        agentgym_core.rollout.action_choices)."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens,
                              constrain_actions=self.constrain_actions, guarantee_action=False)

    def eval_sampling(self, seed: int) -> SamplingParams:
        """How held-out evaluations sample under these settings: ``eval_temperature`` (greedy by default), the
        per-turn cap, ``constrain_actions``, and ``seed`` (the run's). The one definition the trainer's
        evaluations and the warm start's check of its saved evaluations (finetune.run) both read."""
        return SamplingParams(temperature=self.eval_temperature, top_p=1.0, max_new_tokens=self.max_new_tokens,
                              seed=seed, constrain_actions=self.constrain_actions, guarantee_action=True)


class KLConfig(_Section):
    """``algorithm.kl``: the penalty towards the frozen initial policy."""

    coef: float = Field(0.001, ge=0.0, description="KL coefficient beta; 0 disables the reference model.")
    estimator: KLEstimator = Field("low_var_kl", description="k1, k2, k3 or low_var_kl (k3 clamped).")
    in_reward: bool = Field(
        False, description="Subtract beta*KL from token rewards (REINFORCE++/PPO style) instead of a loss term."
    )


class CriticConfig(_Section):
    """``algorithm.critic``: the critic GAE needs (see ``agentgym_core.rl.critic``)."""

    enabled: bool = Field(False, description="Train a critic (value function); GAE needs one.")
    kind: Literal["separate", "shared_trunk"] = Field(
        "separate", description="'separate': a model of its own with a value head; 'shared_trunk': a value "
        "head on the policy's last hidden state.",
    )
    model_path: str | None = Field(
        None, description="Separate critic: named model or HF directory of its trunk (None: a copy of the "
        "policy's initial weights).",
    )
    vf_coef: float = Field(0.5, ge=0.0, description="Weight of the value loss.")
    value_clip: float | None = Field(0.2, description="Clip range of the value update; None disables.")


class OffPolicyConfig(_Section):
    """``algorithm.off_policy``: correcting for a sampler that is not the learner (see docs: off-policy)."""

    correction: Literal["auto", "none", "tis", "decoupled"] = Field(
        "auto", description="Behaviour-policy correction of the loss: 'tis' weighs each token by min(pi_old / "
        "pi_sampler, cap); 'decoupled' weighs by pi_old / pi_sampler and drops tokens past the cap (recomputes the "
        "old log-probs); 'none'; 'auto': tis wherever the sampler is not the learner's own module in the same "
        "precision (another backend, the Ray launcher, several learners, asynchronous rollouts, mixed precision).",
    )
    cap: float = Field(2.0, gt=1.0, description="Largest importance weight pi_old / pi_sampler a token may carry.")
    warn_kl: float | None = Field(
        0.05, gt=0.0, description="Warn when the step's sampler-to-learner KL estimate (sampler_kl) passes this.")
    stop_kl: float | None = Field(
        0.5, gt=0.0, description="Skip the step's update and stop the run when sampler_kl of the worst environment "
        "or rollout worker passes this (a sync that did not take, a wrong chat template); None never stops.")


class AlgorithmConfig(_Section):
    """``algorithm``: estimator, losses and the PPO update schedule.

    ``old_logprobs: current`` takes the update's own log-probs, detached, as the ratio's denominator:
    the same numbers as a scoring pass when each batch gets one optimizer step (``ppo_epochs`` and
    ``mini_batches`` 1), without that extra forward; it needs no critic and no KL term, whose inputs
    come from the scoring pass. ``auto`` picks it where it is exact. ``drop_zero_advantage`` is off
    by default, as in verl: rows of tied groups carry no policy-gradient signal but still carry the
    KL and entropy terms and count in the loss normaliser. ``packing`` needs transformers >= 4.53.1
    and torch >= 2.6 (older ones let packed sequences attend to each other; the config refuses them).
    """

    estimator: str = Field("grpo", description="Advantage estimator plugin: gae, grpo, rloo, reinforce_pp, ...")
    # SerializeAsAny: a plugin's options subclass is saved with its own fields (see rl.plugin_options).
    advantage: SerializeAsAny[AdvantageConfig] = Field(
        default_factory=AdvantageConfig, description="Estimator knobs (plus the estimator plugin's own).")
    rounds_ctrl: SerializeAsAny[RoundsConfig] = Field(
        default_factory=RoundsConfig, description="Turn-horizon schedule (plus the scheduler plugin's own options).")
    kl: KLConfig = Field(default_factory=KLConfig, description="KL to the reference policy.")
    critic: CriticConfig = Field(default_factory=CriticConfig, description="Value head (GAE).")
    off_policy: OffPolicyConfig = Field(
        default_factory=OffPolicyConfig, description="Correction for tokens the learner did not sample itself.")
    truncated_episodes: Literal["train", "drop"] | float = Field(
        "train", description="Episodes cut by the turn or token budget: 'train' them with the reward the env "
        "gave (as a failure, usually), 'drop' them from the batch (overlong filtering), or a number that "
        "replaces their last turn's reward.")
    clip_low: float = Field(0.2, ge=0.0, description="PPO clip: ratio >= 1 - clip_low.")
    clip_high: float | None = Field(None, ge=0.0, description="PPO clip-higher: ratio <= 1 + clip_high (None: clip_low).")
    clip_ratio_c: float | None = Field(
        3.0, gt=1.0, description="PPO dual clip: the loss on tokens with a negative advantage is capped at "
        "clip_ratio_c * |A| (None: off).",
    )
    loss_agg: Aggregation = Field("token_mean", description="token_mean, seq_mean_token_mean, seq_mean_token_sum_norm.")
    entropy_coef: float = Field(0.0, ge=0.0, description="Entropy bonus weight.")
    invalid_action_penalty: float = Field(
        0.0, ge=0.0, description="Subtracted from a turn's reward when the environment refused its action "
        "(StepResult.invalid_action); 0 leaves rewards as the environment gave them.")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each step's batch.")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per epoch (the batch is split this many ways).")
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="Gradient clipping; None disables.")
    packing: bool = Field(
        False, description="Pack several sequences per row (block-diagonal attention) in the update forward.",
    )
    micro_batch_tokens: int = Field(4096, ge=64, description="Tokens per forward/backward in the update.")
    drop_zero_advantage: bool = Field(
        False, description="Leave trajectories whose advantages are all 0 (tied groups) out of the update.",
    )

    old_logprobs: Literal["auto", "recompute", "current"] = Field(
        "auto", description="The PPO ratio's denominator: 'recompute' (a scoring pass before the update), "
        "'current' (the update's own, detached) or 'auto'.",
    )

    @property
    def recomputes_old_logprobs(self) -> bool:
        """Whether the learner scores the batch before the update (see ``old_logprobs``)."""
        if self.off_policy.correction == "decoupled":  # its proximal policy is the recomputed one
            return True
        if self.old_logprobs != "auto":
            return self.old_logprobs == "recompute"
        return self._current_logprobs_problem() is not None

    def _current_logprobs_problem(self) -> str | None:
        if self.ppo_epochs != 1 or self.mini_batches != 1:
            return (f"ppo_epochs={self.ppo_epochs} and mini_batches={self.mini_batches} make several optimizer steps "
                    "per batch, after which the current weights are no longer the ones that sampled it")
        if self.critic.enabled:
            return "the critic's old values come from the scoring pass"
        if self.kl.coef > 0:
            return "the KL estimate to the reference is computed in the scoring pass"
        return None

    @model_validator(mode="after")
    def _current_logprobs_only_when_exact(self) -> AlgorithmConfig:
        problem = self._current_logprobs_problem() if self.old_logprobs == "current" else None
        if self.old_logprobs == "current" and self.off_policy.correction == "decoupled":
            problem = "off_policy.correction=decoupled takes the recomputed log-probs as its proximal policy"
        if problem is not None:
            raise ValueError(f"algorithm.old_logprobs=current is not exact here: {problem}. Use "
                             "algorithm.old_logprobs=recompute (or auto, which picks it)")
        return self

    @model_validator(mode="after")
    def _packing_needs_recent_transformers(self) -> AlgorithmConfig:
        if self.packing:
            problem = packing.packing_support_problem(packing.installed_version("transformers"),
                                                      packing.installed_version("torch"))
            if problem is not None:
                raise ValueError(f"algorithm.packing=true is unsafe here: {problem}. Set algorithm.packing=false "
                                 f"(padded rows give the same numbers), or upgrade: pip install "
                                 f"'transformers>={packing.PACKING_MIN_TRANSFORMERS}' 'torch>={packing.PACKING_MIN_TORCH}'")
        return self


class OptimConfig(_Section):
    """``optim``: AdamW and its learning-rate schedule."""

    lr: float = Field(1e-6, gt=0.0, description="Peak learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up, in training steps.")
    schedule: Literal["constant", "cosine"] = Field("constant", description="Decay after warm-up.")
    critic_lr: float | None = Field(None, gt=0.0, description="Value head learning rate (None: 10 x lr).")
    low_precision_params: bool = Field(
        False, description="Let AdamW update bfloat16/float16 weights directly instead of float32 master "
        "weights (warns).")


class ActorResources(_Section):
    """What one Ray actor asks for (``trainer.ray.learner_resources``, ``trainer.ray.rollout_resources``)."""

    num_cpus: float = Field(1.0, ge=0.0, description="CPU cores reserved for the actor.")
    num_gpus: float = Field(0.0, ge=0.0, description="GPUs reserved for the actor (fractions share one GPU).")
    resources: dict[str, float] = Field(
        default_factory=dict, description="Custom Ray resources, e.g. {node_a: 1} to pin the actor to nodes "
        "started with `ray start --resources '{\"node_a\": 1}'`.")

    @model_validator(mode="after")
    def _asks_for_something(self) -> ActorResources:
        if self.num_cpus <= 0 and self.num_gpus <= 0 and not any(v > 0 for v in self.resources.values()):
            raise ValueError("an actor must ask for some resource (Ray places actors by what they ask): set "
                             "num_cpus or num_gpus above 0")
        return self


class RayConfig(_Section):
    """``trainer.ray``: where the Ray launcher places its actors and how it handles their failures."""

    address: str | None = Field(
        None, description="The cluster to join ('auto', 'ray://host:10001'; None: $RAY_ADDRESS, a local Ray, or a "
        "private one for this run).")
    rollout_workers: int = Field(
        1, ge=1, description="Rollout worker actors; each step's episodes are split between them.")
    learner_resources: ActorResources = Field(
        default_factory=ActorResources, description="Resources of each learner rank's actor.")
    rollout_resources: ActorResources = Field(
        default_factory=ActorResources, description="Resources of each rollout worker's actor.")
    placement_timeout_s: float = Field(
        120.0, gt=0.0, description="Seconds to wait for the cluster to place every actor before the run fails.")
    remote_timeout_s: float = Field(
        1800.0, gt=0.0, description="Seconds one call to an actor may take before the run fails naming it.")
    rollout_worker_restarts: int = Field(
        1, ge=0, description="Times a rollout worker that died is restarted and its batch sampled again.")


# The held-out panel's keys, one definition for the RL and the fine-tuning trainer (their help written once)
EVAL_TASKS = Field(20, ge=0, description="Held-out tasks per environment per evaluation (0: none).")
EVAL_SAMPLES = Field(
    1, ge=1, description="Episodes per held-out task: K > 1 compares each task's success rate (Avg@K) at "
    "rollout.eval_temperature, which must then be above 0; steadier than one greedy episode, K times the time "
    "(an RL recipe's warm start plays the RL trainer's K).")


class TrainerConfig(_Section):
    """``trainer``: the run itself."""

    steps: int = Field(100, ge=1, description="Training steps (one batch of rollouts + one update each).")
    learners: int = Field(
        1, ge=1, description="Learner ranks (FSDP2 shards of the policy): processes of this machine, or the "
        "ranks torchrun started.")
    collective_timeout_s: float = Field(
        1800.0, gt=0.0, description="With several learner ranks: seconds a rank waits in one collective call "
        "(NCCL's watchdog, gloo's timeout) before the run fails.")
    seed: int = Field(0, description="Seed of task order, sampling and initialisation.")
    run_dir: str = Field("runs/run", description="Where config, metrics, checkpoints and trajectories go.")
    eval_every: int = Field(0, ge=0, description="Evaluate on held-out tasks every N steps (0: only before/after).")
    eval_tasks: int = EVAL_TASKS
    eval_samples: int = EVAL_SAMPLES
    eval_before: bool = Field(True, description="Evaluate the initial model before training.")
    save_every: int = Field(10, ge=1, description="Checkpoint every N steps (the last step is always saved).")
    keep_checkpoints: int = Field(2, ge=1, description="Most recent checkpoints kept on disk; older ones are deleted.")
    hf_weights_every_checkpoint: bool = Field(
        False, description="Sharded checkpoints (trainer.learners > 1): also write Hugging Face weights under "
        "model/ at every checkpoint, not only the final one.")
    save_trajectories: bool = Field(True, description="Write each step's trajectories as JSONL.")
    tensorboard: bool = Field(False, description="Also log to TensorBoard (`pip install tensorboard`; warns once when it is missing).")
    wandb_project: str | None = Field(None, description="Log to this wandb project (needs wandb installed).")
    progress: bool = Field(True, description="Show a console progress bar.")
    launcher: Literal["local", "ray"] = Field(
        "local", description="'local': learner ranks are processes of this machine that also sample; 'ray': learner "
        "ranks and rollout workers are Ray actors placed as trainer.ray says.")
    ray: RayConfig = Field(default_factory=RayConfig, description="Placement and fault handling of launcher=ray.")

    @model_validator(mode="after")
    def _ray_options_need_ray(self) -> TrainerConfig:
        if self.launcher == "local" and self.ray.rollout_workers > 1:
            raise ValueError(f"trainer.ray.rollout_workers={self.ray.rollout_workers} needs trainer.launcher=ray (the "
                             "local launcher runs one rollout worker in the driver process)")
        return self


class TrainConfig(_Section):
    """The whole run. Sections: model, envs, rollout, algorithm, optim, trainer, warm_start, runtime."""

    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model.")
    envs: list[EnvConfig] = Field(description="Environments to train on (one or more).", min_length=1)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling.")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="RL algorithm.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer.")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="Run control.")
    warm_start: WarmStartConfig | None = Field(
        None, description="Supervised warm start before RL (SFT on expert demos or trajectory files); the KL "
        "reference and the 'before' evaluation are then the fine-tuned model.",
    )
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, description="Process and memory knobs.")
    # What the rollout backend declares (its capabilities' shares_trainer_module), set by
    # rl.plugin_options.bind_plugin_options; None until the recipe is bound to its plugins.
    _backend_shares_module: bool | None = None

    @property
    def off_policy_correction(self) -> Literal["none", "tis", "decoupled"]:
        """``algorithm.off_policy.correction`` with ``auto`` resolved (see its help) from what the backend
        declares; a config not yet bound to its plugins counts as sampling elsewhere (tis)."""
        chosen = self.algorithm.off_policy.correction
        if chosen != "auto":
            return chosen
        own_module = (self._backend_shares_module is True and self.trainer.launcher == "local"
                      and self.trainer.learners == 1 and self.rollout.max_staleness == 0
                      and self.model.mixed_precision == "no")
        return "none" if own_module else "tis"

    @model_validator(mode="after")
    def _ray_rollout_workers_load_full_weights(self) -> TrainConfig:
        if self.model.lora.enabled and self.trainer.launcher == "ray":
            raise ValueError("model.lora.enabled with trainer.launcher=ray: Ray's rollout workers load model.path "
                             "without the adapters, so the first weight sync would fail; use trainer.launcher=local")
        return self

    @model_validator(mode="after")
    def _expert_solved_tasks_replace_no_list(self) -> TrainConfig:
        demos = self.warm_start.expert if self.warm_start is not None else None
        if demos is None or demos.rl_tasks != "solved":
            return self
        name = demos.env or self.envs[0].name
        env = next((e for e in self.envs if e.name == name), None)
        if env is not None and env.train_tasks is not None:
            raise ValueError(f"warm_start.expert.rl_tasks=solved and envs[{name}].train_tasks both choose RL's "
                             "training tasks; keep one of them")
        return self

    @model_validator(mode="after")
    def _sharded_learners_train_full_weights_in_memory(self) -> TrainConfig:
        if self.trainer.learners > 1:
            refused = [reason for on, reason in [
                (self.algorithm.critic.enabled, "algorithm.critic.enabled (use grpo, rloo or reinforce_pp)"),
                (self.runtime.optimizer_state_to_disk, "runtime.optimizer_state_to_disk (sharded optimizer states "
                 "are not written to disk)"),
            ] if on]
            if refused:
                raise ValueError(f"trainer.learners={self.trainer.learners} does not support {'; nor '.join(refused)}"
                                 ". Set trainer.learners=1, or turn it off")
        return self

    @model_validator(mode="after")
    def _stale_samples_need_recomputed_old_logprobs(self) -> TrainConfig:
        if self.rollout.max_staleness > 0:
            if self.algorithm.old_logprobs == "current":
                raise ValueError(
                    f"algorithm.old_logprobs=current with rollout.max_staleness={self.rollout.max_staleness}: the "
                    "update's own log-probs leave the PPO ratio at 1, so nothing bounds how far the policy moves "
                    "from the one that sampled. Use algorithm.old_logprobs=recompute (or auto)")
            self.algorithm.old_logprobs = "recompute"  # auto: the proximal policy is the learner before the update
        return self

    @model_validator(mode="after")
    def _several_evaluation_samples_are_sampled(self) -> TrainConfig:
        check_eval_samples(self.trainer.eval_samples, self.rollout.eval_temperature)
        return self

    @model_validator(mode="after")
    def _engine_on_the_learners_gpu_samples_between_updates_only(self) -> TrainConfig:
        # backend_options.gpu_sharing / sleep_level: the convention of backends that share the learner's GPU
        # and sleep through its update (vLLM's colocated engine).
        options = self.rollout.backend_options
        if options.get("gpu_sharing") != "colocate":
            return self
        if self.rollout.max_staleness > 0:
            raise ValueError(
                f"rollout.backend_options.gpu_sharing=colocate with rollout.max_staleness={self.rollout.max_staleness}: "
                "asynchronous rollouts sample during the update, which would wake the engine on the learner's GPU in "
                "the middle of it. Use gpu_sharing: separate (the engine on GPUs of its own) for asynchronous "
                "rollouts, or max_staleness: 0")
        if options.get("sleep_level") == 2:
            again = [name for name, on in [
                ("rollout.rerun_failed > 0", self.rollout.rerun_failed > 0),
                ("rollout.dynamic_sampling", bool(self.rollout.dynamic_sampling.min_mixed_groups)),
                ("trainer.eval_before", self.trainer.eval_before and bool(self.trainer.eval_tasks)),
                ("trainer.eval_every", bool(self.trainer.eval_every) and bool(self.trainer.eval_tasks)),
                # the probe scores on the engine after each load: that batch's end puts it to sleep again
                ("rollout.sync_check_tolerance (the weight-sync probe)", self.rollout.sync_check_tolerance is not None),
            ] if on]
            if again:
                raise ValueError(
                    "rollout.backend_options.sleep_level=2 discards the engine's weights when it sleeps, but "
                    f"{', '.join(again)} sample again after it slept and before the next weight load, from "
                    "discarded weights. Use sleep_level: 1 (weights kept in host memory), or turn those off")
        return self


def check_eval_samples(eval_samples: int, eval_temperature: float) -> None:
    """Refuse ``trainer.eval_samples`` > 1 with greedy evaluations (RL and fine-tuning recipes alike)."""
    if eval_samples > 1 and eval_temperature == 0:
        raise ValueError(
            f"trainer.eval_samples={eval_samples} with rollout.eval_temperature=0: greedy replies play each task "
            "the same way every time. Set rollout.eval_temperature (e.g. 1.0, the usual training temperature) to "
            "measure sampled success, or trainer.eval_samples=1 for one greedy episode a task")


# -- loading (the loader itself is agentgym_core.recipes, shared with fine-tuning) -------------

def load_config(path: str | Path | None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML recipe, apply overrides, validate. Errors are :class:`ConfigError` with the fix."""
    return load_recipe(TrainConfig, path, overrides)


def check_group_size(config: TrainConfig, estimate: Estimator | None, declared: object = None) -> None:
    """Raise :class:`ConfigError` when ``rollout.group_size`` is below what the estimator needs.

    GRPO and RLOO take their baseline from the other samples of the same task; with one sample per
    task every advantage is 0 and the run would train nothing. Estimators declare the minimum when they
    are registered (``declared``: ``register(name, obj, min_group_size=2)``; see
    :mod:`agentgym_core.rl.estimator_api`); the core knows no names.
    """
    needed = min_group_size(estimate, declared)
    have = config.rollout.group_size
    if have < needed:
        name = config.algorithm.estimator
        raise ConfigError(
            f"rollout.group_size={have} but algorithm.estimator={name!r} needs at least {needed} samples per task "
            f"(its baseline is the other samples of the same task; with fewer every advantage is 0 and nothing "
            f"trains). Set rollout.group_size={max(needed, 4)} (the anchor uses 4-8), or pick an estimator that "
            f"needs no group, e.g. algorithm.estimator=reinforce_pp."
        )


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config (all defaults filled in) as YAML."""
    save_recipe(config, path)
