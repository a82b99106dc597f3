"""The pieces the training loop is built from: policy, backend, environments, optimizer, evaluation."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from agentgym_core.http.pool import EnvPool, PooledEnv
from agentgym_core.plugins import PluginManager
from agentgym_core.rl.config import EnvConfig, ModelConfig, OptimConfig, RuntimeConfig, TrainConfig
from agentgym_core.rl.guards import evaluation_panel, panel_hash
from agentgym_core.rollout.backend import SamplingParams, capabilities_of
from agentgym_core.rollout.engine import EngineConfig, EnvSource, EpisodeSpec, RolloutEngine
from agentgym_core.rollout.progress import RolloutProgress
from agentgym_core.rollout.trajectory import Trajectory, invalid_action_rate
from agentgym_core.training.activation_checkpointing import checkpoint_only_above
from agentgym_core.training.memory import limit_onednn_primitive_cache

__all__ = [
    "EnvHandle", "apply_runtime", "build_optimizer", "evaluate", "load_policy", "load_policy_for_ranks", "make_backend", "open_envs",
    "resolve_device", "summarize",
]


def resolve_device(device: str) -> torch.device:
    """``model.device`` as a torch device: ``auto`` is CUDA when present, else the CPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def apply_runtime(runtime: RuntimeConfig) -> None:
    """This process's share of the recipe's ``runtime``: torch threads and oneDNN's kernel cache."""
    if runtime.threads:
        torch.set_num_threads(runtime.threads)
    if runtime.onednn_primitive_cache is not None:  # before this process's first oneDNN kernel
        limit_onednn_primitive_cache(runtime.onednn_primitive_cache)


def load_policy(config: ModelConfig, device: str | torch.device | None = None, *,
                runtime: RuntimeConfig | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from ``config.path`` on ``device`` (default ``config.device``); with LoRA
    enabled, wrapped with fresh peft adapters. On the ``meta`` device: the model's structure only,
    no weights read (a learner rank that receives its shards from rank 0). ``runtime``, when given,
    is applied to this process first (:func:`apply_runtime`)."""
    from agentgym_core.models import load_pretrained

    if runtime is not None:
        apply_runtime(runtime)
    device = resolve_device(config.device) if device is None else torch.device(device)
    if device.type == "meta":
        model, tokenizer = _model_structure(config)
    else:
        model, tokenizer = load_pretrained(config.path, device=str(device), dtype=config.dtype)
    if config.gradient_checkpointing:  # transformers 5 renamed it; 4.x has only the old name
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    if config.lora.enabled:
        model = wrap_lora(model, config)
    if config.gradient_checkpointing_above_tokens is not None:
        checkpoint_only_above(model, config.gradient_checkpointing_above_tokens)
    model.eval()
    return model, tokenizer


def load_policy_for_ranks(config: ModelConfig, device: torch.device, *, rank: int, world_size: int,
                          runtime: RuntimeConfig | None = None) -> tuple[Any, Any]:
    """The policy as a learner rank builds it before FSDP2 shards it, without a full copy per GPU.

    One process: :func:`load_policy` on ``device``. Several ranks: rank 0 reads the weights into host
    memory, every other rank builds the structure on the ``meta`` device (nothing allocated); once
    sharded, the learner moves each rank's shards to ``device`` and rank 0 broadcasts the weights
    tensor by tensor (:meth:`agentgym_core.rl.learner.Learner`). Both in the dtype ``device`` gets.
    """
    if world_size <= 1:
        return load_policy(config, device=device, runtime=runtime)
    if config.dtype == "auto":  # what load_pretrained picks on the training device, not on the host
        config = config.model_copy(update={"dtype": "bfloat16" if device.type == "cuda" else "float32"})
    return load_policy(config, device="cpu" if rank == 0 else "meta", runtime=runtime)


def _model_structure(config: ModelConfig) -> tuple[Any, Any]:
    """(model on the meta device, tokenizer) for ``config.path``: its config read, no weight loaded."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from agentgym_core.models import _load_kwargs, load_tokenizer, resolve_model

    resolved = resolve_model(config.path)
    dtype = torch.float32 if config.dtype == "auto" else getattr(torch, config.dtype)
    model_config = AutoConfig.from_pretrained(resolved.directory, **_load_kwargs(resolved))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config, dtype=dtype)
    return model, load_tokenizer(resolved)


def wrap_lora(model: Any, config: ModelConfig) -> Any:
    """Wrap ``model`` with trainable LoRA adapters."""
    try:
        import peft
    except ImportError as exc:
        raise RuntimeError("model.lora.enabled needs peft: pip install peft") from exc
    lora = config.lora
    return peft.get_peft_model(model, peft.LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules,
        task_type="CAUSAL_LM"))


def make_backend(pm: PluginManager, config: TrainConfig, model: Any, tokenizer: Any) -> tuple[Any, bool]:
    """The rollout backend, and whether it shares the trainer's module (no weight copy needed).

    A backend whose factory declares ``capabilities.shares_trainer_module`` is lent ``model`` (when
    one is given); any other loads its own copy from ``model.path`` and receives weights every step.
    """
    factory = pm.get("rollout_backend", config.rollout.backend)
    options = {"model": config.model.path, **config.rollout.backend_options}
    if model is not None and capabilities_of(factory).shares_trainer_module:
        return factory(options, model=model, tokenizer=tokenizer), True
    return factory(options), False


@dataclass
class EnvHandle:
    """One training environment: its config, its servers (a pool of one or more) and task catalog."""

    config: EnvConfig
    pool: EnvPool
    train_tasks: list[int]
    test_tasks: list[int]
    categories: dict[int, str]

    @property
    def name(self) -> str:
        return self.config.name

    def make_env(self) -> PooledEnv:
        """A new instance handle; the pool places it on the least-loaded healthy server."""
        return self.pool.make_env()


@contextlib.contextmanager
def open_envs(pm: PluginManager, configs: list[EnvConfig], *, timeout_s: float = 60.0) -> Iterator[list[EnvHandle]]:
    """Connect to each env's servers (``url`` or ``urls``); start one on loopback (in this process) when none is given.

    ``timeout_s`` limits one HTTP request (``rollout.env_timeout_s`` in the trainer). Every server
    must answer with the env's name and the same catalog; one that does not answer starts marked down.
    """
    from agentgym_core.http.serving import serve_env

    with contextlib.ExitStack() as stack:
        handles = []
        for cfg in configs:
            urls = cfg.server_urls
            if not urls:
                env_cls = pm.env_class(cfg.name)
                urls = [stack.enter_context(serve_env(env_cls, cfg.env_kwargs,
                                                      max_instances=max(64, cfg.max_concurrency)))]
            pool = EnvPool(urls, env=cfg.name, timeout=timeout_s, probe_interval_s=cfg.probe_interval_s)
            stack.callback(pool.close)
            catalog = pool.check()
            train = cfg.train_tasks if cfg.train_tasks is not None else catalog.split(cfg.train_split)
            # Round-robin over categories, so the first eval_tasks are the tasks `agentgym eval --limit N` runs.
            test = cfg.test_tasks if cfg.test_tasks is not None else catalog.spread(
                cfg.test_split, len(catalog.split(cfg.test_split)))
            handles.append(EnvHandle(cfg, pool, list(train), list(test), catalog.category_index()))
        yield handles


def build_optimizer(params: list[torch.nn.Parameter], critic_params: list[torch.nn.Parameter],
                    config: OptimConfig, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (the value head in its own group) and a per-training-step LR schedule."""
    groups = [{"params": params, "lr": config.lr}]
    if critic_params:
        groups.append({"params": critic_params, "lr": config.critic_lr or 10 * config.lr})
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)

    def factor(step: int) -> float:
        if config.warmup_steps and step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.schedule == "cosine":
            progress = (step - config.warmup_steps) / max(1, total_steps - config.warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def summarize(trajectories: list[Trajectory], prefix: str = "") -> dict[str, float]:
    """Success, reward and turn means, failures and the invalid-action rate over trajectories, overall and per
    environment."""
    out: dict[str, float] = {}
    by_env: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_env.setdefault(t.env, []).append(t)
    for name, group in [("", trajectories), *((f"{e}/", g) for e, g in sorted(by_env.items()))]:
        n = max(len(group), 1)
        out[f"{prefix}{name}success"] = sum(t.success for t in group) / n
        out[f"{prefix}{name}reward"] = sum(t.outcome_reward for t in group) / n
        out[f"{prefix}{name}turns"] = sum(t.num_turns for t in group) / n
        out[f"{prefix}{name}failed"] = float(sum(t.failed for t in group))
        out[f"{prefix}{name}truncated"] = float(sum(t.truncated for t in group))
        rate = invalid_action_rate(group)
        if rate is not None:  # only environments that say which actions they refused
            out[f"{prefix}{name}invalid_action_rate"] = rate
    return out


def evaluate(backend: Any, envs: list[EnvHandle], config: TrainConfig, horizon: int, step: int) -> dict[str, Any]:
    """Greedy (or ``eval_temperature``) episodes on the first ``eval_tasks`` held-out tasks of each env
    (taken round-robin across categories, as ``agentgym eval --limit`` takes them); every env at once."""
    sampling = SamplingParams(temperature=config.rollout.eval_temperature, top_p=1.0,
                              max_new_tokens=config.rollout.max_new_tokens, seed=config.trainer.seed)
    episodes: list[EpisodeSpec] = []
    sources: dict[str, EnvSource] = {}
    for env in envs:
        tasks = env.test_tasks[: config.trainer.eval_tasks]
        if not tasks:
            continue
        sources[env.name] = EnvSource(env.make_env, min(env.config.max_concurrency, len(tasks)))
        episodes += [EpisodeSpec(task_id=t, seed=None, category=env.categories.get(t), env=env.name) for t in tasks]
    if not episodes:
        return {"step": step, "horizon": horizon, "tasks": 0, **summarize([])}
    # One line for every env, moving every turn (a greedy episode of a small model takes minutes on a CPU).
    line = RolloutProgress(len(episodes), desc=f"eval {', '.join(sources)} (step {step})", max_turns=horizon,
                           enabled=config.trainer.progress, leave=False)

    successes = 0

    def done(traj: Trajectory) -> None:
        nonlocal successes
        successes += int(traj.success)
        line.done(traj, success=f"{successes}/{line.finished + 1}")

    engine_cfg = EngineConfig(sampling=sampling, max_turns=horizon, max_total_tokens=config.rollout.max_total_tokens,
                              step_timeout_s=config.rollout.env_timeout_s,
                              env_workers=sum(source.num_envs for source in sources.values()))
    with line, RolloutEngine(backend, sources, config=engine_cfg) as engine:
        trajs = engine.run(episodes, on_done=done, on_turn=line.turn)
    metrics = summarize(trajs)
    # Per task, so two evaluations of the same tasks compare pairwise (agentgym_core.evaluation.paired).
    per_task = {f"{t.env}:{t.task_id}": int(t.success) for t in trajs}
    panel = panel_hash(evaluation_panel(envs, config.trainer.eval_tasks))  # the run logged it at its start
    return {"step": step, "horizon": horizon, "tasks": len(trajs), **metrics, "per_task": per_task,
            "panel_hash": panel}
