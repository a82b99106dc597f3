"""`agentgym eval --from RUN_DIR` (or a recipe): the evaluation a training run makes, as an ``EvalConfig``.

The trainer's held-out evaluations play the panel of ``trainer.eval_tasks`` test tasks of each
environment with the run's evaluation sampling (``rollout.eval_temperature``, the rollout's token
caps, the run's seed), its backend and backend options, the environment's action format, and the
final horizon of its round schedule.
:func:`eval_config_from_run` gives `agentgym eval` exactly those settings, so the two give the same
numbers on the same checkpoint, and the same panel hash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym_core.evaluation.run import EvalConfig
from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import TrainConfig, load_config
from agentgym_core.rl.envs import eval_sampling
from agentgym_core.rl.plugin_options import final_horizon_of
from agentgym_core.training.checkpoint import latest_checkpoint

__all__ = ["eval_config_from_run"]


def _recipe_and_model(source: Path) -> tuple[TrainConfig, str]:
    """A run directory: its saved config and its newest checkpoint's weights; a recipe: itself and its model."""
    if source.is_dir():
        if not (source / "config.yaml").is_file():
            raise ConfigError(f"--from {source}: no config.yaml there; name a training run's directory (its "
                              "trainer.run_dir) or a recipe file")
        checkpoint = latest_checkpoint(source)
        if checkpoint is None:
            raise ConfigError(f"--from {source}: the run has no complete checkpoint yet; pass --model to evaluate "
                              "other weights with the run's settings")
        return load_config(source / "config.yaml"), str(checkpoint / "model")
    config = load_config(source)
    return config, config.model.path


def eval_config_from_run(source: str | Path, *, env: str | None = None, overrides: dict[str, Any] | None = None,
                         plugin_manager: PluginManager | None = None) -> EvalConfig:
    """The ``EvalConfig`` of ``source``'s held-out evaluation of environment ``env`` (the run's only one when
    None); ``overrides`` (settings the user typed: ``model``, ``out_dir``, ``limit``, ...) win."""
    config, model = _recipe_and_model(Path(source))
    names = [e.name for e in config.envs]
    if env is None and len(names) > 1:
        raise ConfigError(f"--from {source}: the run trains on {', '.join(names)}; pick one with --env")
    chosen = next((e for e in config.envs if e.name == (env or names[0])), None)
    if chosen is None:
        raise ConfigError(f"--from {source}: the run has no environment {env!r}; it has {', '.join(names)}")
    if chosen.test_tasks is not None:
        raise ConfigError(f"--from {source}: envs entry {chosen.name!r} lists its test_tasks, which agentgym eval "
                          "cannot take; evaluate it within a training run (trainer.eval_tasks)")
    if not config.trainer.eval_tasks:
        raise ConfigError(f"--from {source}: trainer.eval_tasks is 0, so the run evaluates nothing; pass --limit N")
    sampling = eval_sampling(config)
    options = {k: v for k, v in config.rollout.backend_options.items() if k != "model"}
    settings: dict[str, Any] = dict(
        env=chosen.name, model=model, backend=config.rollout.backend, backend_options=options,
        split=chosen.test_split, categories=chosen.categories, limit=config.trainer.eval_tasks, env_options=dict(chosen.env_kwargs),
        action_format=chosen.action_format, n_samples=config.trainer.eval_samples, temperature=sampling.temperature, top_p=sampling.top_p,
        max_new_tokens=sampling.max_new_tokens, constrain_actions=sampling.constrain_actions,
        max_rounds=final_horizon_of(config, plugin_manager or get_plugin_manager()),
        max_total_tokens=config.rollout.max_total_tokens, seed=sampling.seed,
        env_url=chosen.server_urls[0] if chosen.server_urls else None, step_timeout_s=config.rollout.env_timeout_s,
        num_envs=chosen.max_concurrency, device=config.model.device)
    return EvalConfig(**{**settings, **(overrides or {})})
