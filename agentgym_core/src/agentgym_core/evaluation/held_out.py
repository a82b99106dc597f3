"""The one evaluator: a model's episodes on held-out tasks, with a progress line that moves every turn.

`agentgym eval` (:func:`agentgym_core.evaluation.run.evaluate`, which adds its run directory, log and
resume) and the trainer's evaluations (:func:`evaluate_held_out`) both play through :func:`play` and
report :class:`agentgym_core.evaluation.results.EvalResults`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from agentgym_core.env import Env
from agentgym_core.evaluation.panel import evaluation_conditions, panel_hash, panel_tasks
from agentgym_core.evaluation.results import EvalResults, build_results
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.rollout.engine import EngineConfig, EnvSource, EpisodeSpec, RolloutEngine, RolloutStats
from agentgym_core.rollout.progress import RolloutProgress
from agentgym_core.rollout.text_engine import TextRolloutEngine, is_chat_backend
from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["HeldOutEnv", "evaluate_held_out", "play"]


def play(backend: Any, sources: Mapping[str, EnvSource], episodes: Sequence[EpisodeSpec], config: EngineConfig, *,
         desc: str, progress: bool = True, leave: bool = True,
         on_done: Callable[[Trajectory], None] | None = None) -> tuple[list[Trajectory], RolloutStats]:
    """Play ``episodes`` (each names its env, a key of ``sources``) with ``backend``; the token engine for a local
    backend, the text engine for an API model. One progress line for all, moving every turn, with the
    successes so far. Returns the trajectories in ``episodes``' order and the engine's statistics."""
    line = RolloutProgress(len(episodes), desc=desc, max_turns=config.max_turns, enabled=progress, leave=leave)
    engine_cls = TextRolloutEngine if is_chat_backend(backend) else RolloutEngine
    if len(sources) == 1:  # the text engine plays one environment; so does `agentgym eval`
        (name, source), = sources.items()
        engine = engine_cls(backend, source.make_env, num_envs=source.num_envs, config=config, env_name=name)
    else:
        engine = engine_cls(backend, sources, config=config)
    successes = 0
    with line, engine:
        def done(traj: Trajectory) -> None:
            nonlocal successes
            successes += int(traj.success)
            if on_done is not None:
                on_done(traj)  # e.g. the log write: before the line moves, so what it shows is kept
            failed = {"failed": engine.stats.failed} if engine.stats.failed else {}
            line.done(traj, success=f"{successes}/{line.finished + 1}", **failed)

        trajs = engine.run(list(episodes), on_done=done, on_turn=line.turn)
    return trajs, engine.stats


class HeldOutEnv(Protocol):
    """What :func:`evaluate_held_out` needs of an environment (:class:`agentgym_core.rl.envs.EnvHandle`)."""

    @property
    def name(self) -> str: ...
    @property
    def max_concurrency(self) -> int: ...
    test_tasks: list[int]
    categories: dict[int, str]

    def make_env(self) -> Env: ...


def evaluate_held_out(backend: Any, envs: Sequence[HeldOutEnv], *, tasks_per_env: int, sampling: SamplingParams,
                      horizon: int, max_total_tokens: int, step_timeout_s: float, desc: str,
                      progress: bool = True) -> EvalResults:
    """The panel of ``tasks_per_env`` held-out tasks of each env (:func:`agentgym_core.evaluation.panel.panel_tasks`,
    as ``agentgym eval --limit`` takes them), one episode each, every env at once, at most ``horizon`` turns."""
    episodes: list[EpisodeSpec] = []
    sources: dict[str, EnvSource] = {}
    panel: dict[str, list[int]] = {}
    for env in envs:
        tasks = panel_tasks(env.test_tasks, tasks_per_env)
        panel[env.name] = tasks
        if not tasks:
            continue
        sources[env.name] = EnvSource(env.make_env, min(env.max_concurrency, len(tasks)))
        episodes += [EpisodeSpec(task_id=t, seed=None, category=env.categories.get(t), env=env.name) for t in tasks]
    config = {"tasks_per_env": tasks_per_env, "horizon": horizon, "temperature": sampling.temperature,
              "max_new_tokens": sampling.max_new_tokens}
    start = time.perf_counter()
    trajs: list[Trajectory] = []
    stats = RolloutStats()
    if episodes:
        engine = EngineConfig(sampling=sampling, max_turns=horizon, max_total_tokens=max_total_tokens,
                              step_timeout_s=step_timeout_s,
                              env_workers=sum(source.num_envs for source in sources.values()))
        trajs, stats = play(backend, sources, episodes, engine, desc=desc, progress=progress, leave=False)
    wall = time.perf_counter() - start
    conditions = evaluation_conditions(sampling, horizon=horizon, max_total_tokens=max_total_tokens)
    return build_results([(t, t.num_turns, t.invalid_actions) for t in trajs], config=config,
                         panel_hash=panel_hash(panel, conditions), timing=_timing(stats, wall, len(trajs)))


def _timing(stats: RolloutStats, wall: float, n: int) -> dict[str, float]:
    return {"wall_seconds": wall, "gen_seconds": stats.gen_seconds, "sampled_tokens": float(stats.sampled_tokens),
            "trajectories_per_min": 60 * n / wall if wall else 0.0}
