"""Collect trajectories from an environment's expert or from a model, as a rollout log with tokens.

The output is the rollout-log format (:mod:`agentgym_core.rollout.logs`) with ``include_tokens``,
so SFT, DPO and the viewer read it as they read any training or evaluation log.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import random
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agentgym_core.env import Env
from agentgym_core.finetune.config import CollectConfig
from agentgym_core.finetune.data import TokenizerChat
from agentgym_core.finetune.experts import RecordingEnv, expert_trajectory, get_expert, play_expert
from agentgym_core.http.opening import env_factory
from agentgym_core.models import load_tokenizer
from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.rollout.chat import ChatFormat
from agentgym_core.rollout.engine import EngineConfig, EpisodeSpec, RolloutEngine
from agentgym_core.rollout.logs import RolloutLogWriter
from agentgym_core.rollout.progress import RolloutProgress
from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["CollectResult", "collect", "select_tasks"]


@dataclass
class CollectResult:
    """What a collection wrote."""

    path: Path
    trajectories: int = 0
    successes: int = 0
    failed: int = 0
    wall_seconds: float = 0.0
    failure_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def success_rate(self) -> float:
        return self.successes / self.trajectories if self.trajectories else 0.0


def select_tasks(task_ids: list[int], n: int, *, offset: int = 0, shuffle: bool = False, seed: int = 0) -> list[int]:
    """``n`` task ids from a split: in split order, or a seeded shuffle; after skipping ``offset``."""
    ids = list(task_ids)
    if shuffle:
        random.Random(seed).shuffle(ids)
    return ids[offset: offset + n]


def _play_here(expert: Any, make_env: Callable[[], Env], tasks: list[int],
               config: CollectConfig) -> Iterator[tuple[RecordingEnv, str | None]]:
    """The expert's episodes, one after another on one environment of this process."""
    env = make_env()
    try:
        for task in tasks:
            yield play_expert(expert, env, task, max_turns=config.max_turns, timeout_s=config.expert_timeout_s)
    finally:
        env.close()


def _picklable(value: Any) -> bool:
    """Whether ``value`` can go to a worker process (an env class or expert defined inside a function cannot)."""
    try:
        pickle.dumps(value)
    except Exception:  # pickle raises several types (PicklingError, AttributeError, TypeError)
        return False
    return True


def _play_in_processes(config: CollectConfig, worker_setup: tuple[type[Env], dict[str, Any], Any],
                       tasks: list[int]) -> Iterator[tuple[RecordingEnv, str | None]]:
    """The same episodes played by ``config.workers`` processes, yielded in task order.

    Experts are CPU-bound Python (BabyAI's bot searches paths in pure Python: 0.5 s a task), so one
    process uses one core. Each worker gets the environment class, its options and the expert (by
    reference to their modules) and builds its own environment ("spawn": a fork would copy a parent
    that may already run torch threads); episodes come back as recordings, which the parent
    tokenises in order.
    """
    context = multiprocessing.get_context("spawn")
    workers = min(config.workers, len(tasks))
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_expert_worker,
                             initargs=worker_setup) as pool:
        yield from pool.map(_play_in_worker, tasks, [config.max_turns] * len(tasks),
                            [config.expert_timeout_s] * len(tasks))


_worker: dict[str, Any] = {}  # a collection worker process's expert and environment


def _start_expert_worker(env_class: type[Env], env_kwargs: dict[str, Any], expert: Any) -> None:
    env_cls = env_class.configured(**env_kwargs)
    _worker.update(expert=expert, env=env_cls(**env_kwargs))


def _play_in_worker(task: int, max_turns: int, timeout_s: float) -> tuple[RecordingEnv, str | None]:
    recording, error = play_expert(_worker["expert"], _worker["env"], task, max_turns=max_turns, timeout_s=timeout_s)
    return recording.detached(), error


def collect(
    config: CollectConfig,
    *,
    plugin_manager: PluginManager | None = None,
    make_env: Callable[[], Env] | None = None,
    backend: Any = None,
    tokenizer: Any = None,
    progress: bool = True,
) -> CollectResult:
    """Play ``config.n`` tasks (x ``samples`` for a model) and append the trajectories to ``config.out``.

    ``make_env``/``backend``/``tokenizer`` replace building them from the config (tests, notebooks).
    """
    pm = plugin_manager or get_plugin_manager()
    expert = None
    env_kwargs = dict(config.env_kwargs)
    env_cls = None
    if config.policy == "expert":
        expert = get_expert(config.env, pm)
        env_kwargs = {**expert.env_kwargs, **env_kwargs}
    if make_env is None:
        # a server was started with its own options: the expert's defaults apply in this process only
        opened = env_factory(config.env, url=config.env_url, plugin_manager=pm,
                             env_kwargs=config.env_kwargs if config.env_url else env_kwargs)
        make_env, catalog, env_cls = opened.make, opened.tasks(), opened.env_class
    else:
        probe = make_env()
        try:
            catalog = probe.tasks()
        finally:
            probe.close()
    split = catalog.split(config.split)
    if config.categories:
        split = catalog.in_categories(split, config.categories, what=f"{config.split} tasks")
    tasks = select_tasks(split, config.n, offset=config.offset, shuffle=config.shuffle,
                         seed=config.seed)
    categories = catalog.category_index()
    out = Path(config.out or f"runs/collect-{config.env}-{datetime.now():%Y%m%d-%H%M%S}/trajectories.jsonl")
    result = CollectResult(path=out)
    if out.name == "trajectories.jsonl":  # a run directory the viewer lists: say it is a collection, not an eval
        out.parent.mkdir(parents=True, exist_ok=True)
        (out.parent / "collect_config.json").write_text(config.model_dump_json(indent=2) + "\n", encoding="utf-8")
    total = len(tasks) * (1 if expert is not None else config.samples)
    # A model's line moves every turn; an expert plays a task whole, so its line moves per task.
    line = RolloutProgress(total, desc=f"collect {config.env} ({config.policy})", max_turns=config.max_turns,
                           enabled=progress, tokens=expert is None)
    start = time.perf_counter()

    def record(traj: Trajectory, log: RolloutLogWriter) -> None:
        log.write(traj)
        result.trajectories += 1
        result.successes += int(traj.success)
        if traj.failed:
            result.failed += 1
            key = (traj.failure_reason or "").split(":")[0]
            result.failure_reasons[key] = result.failure_reasons.get(key, 0) + 1
        failed = {"failed": result.failed} if result.failed else {}
        line.done(traj, success=f"{result.successes}/{result.trajectories}", **failed)

    with line, RolloutLogWriter(out, include_tokens=True) as log:
        if expert is not None:
            if tokenizer is None:
                tokenizer = load_tokenizer(config.tokenizer)
            chat = ChatFormat(TokenizerChat(tokenizer))
            played = _play_here(expert, make_env, tasks, config)
            if config.workers > 1 and env_cls is not None and len(tasks) > 1:  # in-process envs only
                worker_setup = (pm.env_class(config.env), env_kwargs, expert)
                if _picklable(worker_setup):
                    played = _play_in_processes(config, worker_setup, tasks)
                else:
                    warnings.warn(f"collect workers={config.workers}: {config.env}'s environment class or expert "
                                  "cannot be pickled to a worker process (defined inside a function?); playing in "
                                  "this process", RuntimeWarning, stacklevel=2)
            with contextlib.closing(played):  # the environment or the worker pool closes on an error too
                for task, (recording, error) in zip(tasks, played, strict=True):
                    traj = expert_trajectory(recording, chat, env_name=config.env, category=categories.get(task),
                                             error=error, thought=expert.thought)
                    record(traj, log)
        else:
            if backend is None:
                options: dict[str, Any] = {"model": config.policy}
                if config.device != "auto":
                    options["device"] = config.device
                if config.threads:
                    options["threads"] = config.threads
                backend = pm.get("rollout_backend", config.backend)(options)
            rollout = EngineConfig(
                sampling=SamplingParams(temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                                        seed=config.seed),
                max_turns=config.max_turns, max_total_tokens=config.max_total_tokens,
                env_workers=min(config.num_envs, 32))
            episodes = [EpisodeSpec(task_id=t, sample_index=k, category=categories.get(t))
                        for t in tasks for k in range(config.samples)]
            with RolloutEngine(backend, make_env, num_envs=config.num_envs, config=rollout,
                               env_name=config.env) as engine:
                engine.run(episodes, on_done=lambda traj: record(traj, log), on_turn=line.turn)
    result.wall_seconds = time.perf_counter() - start
    return result
