"""A run's environments and rollout backend: servers connected to (or started on loopback), each env's
training and held-out tasks, the backend built from its plugin, and the held-out evaluation of a run
(the recipe's settings handed to the one evaluator, :mod:`agentgym_core.evaluation.held_out`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym_core.evaluation.held_out import EpisodeLog, PanelShare, panel_results, play_panel_share
from agentgym_core.evaluation.panel import evaluation_conditions, held_out_order
from agentgym_core.http.pool import EnvPool, PooledEnv
from agentgym_core.plugins import PluginManager
from agentgym_core.rl.config import EnvConfig, TrainConfig
from agentgym_core.rl.plugin_options import backend_factory_options
from agentgym_core.rollout.backend import SamplingParams, capabilities_of
from agentgym_core.rollout.tool_calls import tool_call_env

__all__ = ["EnvHandle", "eval_conditions", "eval_sampling", "evaluate", "evaluation_record", "evaluation_share",
           "make_backend", "open_envs"]


def make_backend(pm: PluginManager, config: TrainConfig, model: Any, tokenizer: Any) -> tuple[Any, bool]:
    """The rollout backend, and whether it shares the trainer's module (no weight copy needed).

    A backend whose registration declares ``capabilities`` with ``shares_trainer_module`` is lent ``model`` (when
    one is given); any other loads its own copy from ``model.path`` and receives weights every step.
    """
    registered = pm.registration("rollout_backend", config.rollout.backend)
    factory = registered.obj
    options = backend_factory_options(config, registered.declared("options"))
    if model is not None and capabilities_of(registered.declared("capabilities")).shares_trainer_module:
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
    env_class: type[PooledEnv] = PooledEnv  # tool_call_env(PooledEnv) plays a text server through tool calls

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def max_concurrency(self) -> int:
        return self.config.max_concurrency

    def make_env(self) -> PooledEnv:
        """A new instance handle; the pool places it on the least-loaded healthy server."""
        return self.env_class(self.pool)


@contextlib.contextmanager
def open_envs(pm: PluginManager, configs: list[EnvConfig], *, timeout_s: float = 60.0) -> Iterator[list[EnvHandle]]:
    """Connect to each env's servers (``url`` or ``urls``); start one on loopback (in this process) when none is given,
    and one in front of each OpenEnv server (``protocol: openenv``), which speaks the agentgym protocol to the pool.

    ``timeout_s`` limits one HTTP request (``rollout.env_timeout_s`` in the trainer). Every server
    must answer with the env's name and the same catalog; one that does not answer starts marked down.
    """
    from agentgym_core.http.serving import serve_env

    with contextlib.ExitStack() as stack:
        handles = []
        for cfg in configs:
            urls, env_class = cfg.server_urls, PooledEnv
            if cfg.action_format == "tool_call" and urls:  # a running server plays text: the client reads the call
                env_class = tool_call_env(PooledEnv)
            if cfg.protocol == "openenv":  # each OpenEnv server behind a loopback agentgym server of its own
                from agentgym_core.http.openenv_remote import OpenEnvRemote

                urls = [stack.enter_context(serve_env(OpenEnvRemote, {**cfg.env_kwargs, "url": url}, name=cfg.name,
                                                      max_instances=max(64, cfg.max_concurrency)))
                        for url in urls]
            elif not urls:
                env_cls = pm.env_class(cfg.name)
                if cfg.action_format == "tool_call":
                    env_cls = tool_call_env(env_cls)
                urls = [stack.enter_context(serve_env(env_cls, cfg.env_kwargs,
                                                      max_instances=max(64, cfg.max_concurrency)))]
            pool = EnvPool(urls, env=cfg.name, timeout=timeout_s, probe_interval_s=cfg.probe_interval_s)
            stack.callback(pool.close)
            catalog = pool.check()
            train = cfg.train_tasks if cfg.train_tasks is not None else catalog.split(cfg.train_split)
            # Round-robin over categories; evaluation.panel.panel_tasks takes the panel from it.
            test = cfg.test_tasks if cfg.test_tasks is not None else held_out_order(catalog, cfg.test_split)
            if cfg.categories is not None:
                train = catalog.in_categories(list(train), cfg.categories, what=f"{cfg.name} training tasks")
                test = catalog.in_categories(list(test), cfg.categories, what=f"{cfg.name} held-out tasks")
            handles.append(EnvHandle(cfg, pool, list(train), list(test), catalog.category_index(), env_class))
        yield handles


def eval_sampling(config: TrainConfig) -> SamplingParams:
    """How the run's held-out evaluations sample: ``rollout.eval_temperature`` (greedy by default), the
    rollout's per-turn cap, the run's seed."""
    return config.rollout.eval_sampling(config.trainer.seed)


def eval_conditions(config: TrainConfig, horizon: int) -> dict[str, Any]:
    """The conditions of the run's held-out evaluations (part of their panel hash)."""
    return evaluation_conditions(eval_sampling(config), horizon=horizon,
                                 max_total_tokens=config.rollout.max_total_tokens,
                                 samples_per_task=config.trainer.eval_samples)


def evaluate(backend: Any, envs: list[EnvHandle], config: TrainConfig, horizon: int, step: int, *,
             resumed: bool = False) -> dict[str, Any]:
    """The run's held-out evaluation at ``step``: greedy (or ``eval_temperature``) episodes on the panel of
    ``eval_tasks`` held-out tasks of each env, ``eval_samples`` a task, every env at once; the record the trainer
    logs. ``resumed``: see :func:`evaluation_share`."""
    start = time.perf_counter()
    share = evaluation_share(backend, envs, config, horizon, step, resumed=resumed)
    return evaluation_record([share], horizon, step, wall_seconds=time.perf_counter() - start)


def evaluation_share(backend: Any, envs: list[EnvHandle], config: TrainConfig, horizon: int, step: int,
                     share: tuple[int, int] = (0, 1), *, resumed: bool = False) -> PanelShare:
    """The ``share = (i, N)`` of the run's held-out evaluation at ``step`` that one of N engines plays (the
    panel's episodes i, i+N, ...); the first share shows the progress line. Its episodes are logged as they finish
    to :func:`evaluation_log_path`; ``resumed`` (the weights a resumed run loaded for ``step``, which an
    interrupted evaluation there played too) keeps those already logged and plays the rest."""
    log = EpisodeLog(evaluation_log_path(config.trainer.run_dir, step, share), step=step, model=config.model.path,
                     keep=resumed)
    return play_panel_share(backend, envs, tasks_per_env=config.trainer.eval_tasks, sampling=eval_sampling(config),
                            horizon=horizon, max_total_tokens=config.rollout.max_total_tokens,
                            step_timeout_s=config.rollout.env_timeout_s,
                            desc=f"eval {', '.join(env.name for env in envs)} (step {step})",
                            progress=config.trainer.progress and share[0] == 0, share=share,
                            samples_per_task=config.trainer.eval_samples, log=log)


def evaluation_log_path(run_dir: str | Path, step: int, share: tuple[int, int] = (0, 1)) -> Path:
    """Where the episodes of the run's held-out evaluation at ``step`` are logged (a trajectory log, one file per
    engine playing a share of it): ``evaluations/step_<N>.jsonl``, ``step_<N>.share<i>of<n>.jsonl`` for shares."""
    index, count = share
    name = f"step_{step:06d}" + (f".share{index}of{count}" if count > 1 else "") + ".jsonl"
    return Path(run_dir) / "evaluations" / name


def evaluation_record(shares: list[PanelShare], horizon: int, step: int, *, wall_seconds: float) -> dict[str, Any]:
    """The record the trainer logs of the evaluation at ``step`` that ``shares`` played together."""
    return {"step": step, "horizon": horizon, "temperature": shares[0].config["temperature"],
            **panel_results(shares, wall_seconds).trainer_record()}
