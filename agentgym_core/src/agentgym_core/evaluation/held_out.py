"""The one evaluator: a model's episodes on held-out tasks, with a progress line that moves every turn.

`agentgym eval` (:func:`agentgym_core.evaluation.run.evaluate`, which adds its run directory, log and
resume) and the trainer's evaluations (:func:`evaluate_held_out`) both play through :func:`play` and
report :class:`agentgym_core.evaluation.results.EvalResults`.

Several engines can play one panel (the trainer's learner ranks): :func:`play_panel_share` plays the
episodes ``share = (i, N)`` names, the i-th, (i+N)-th, ... of the panel, each numbered by its place in
the whole panel (so a sampled evaluation seeds every episode as one engine would), and
:func:`panel_results` puts the shares back in the panel's order: N engines report what one reports.

With an :class:`EpisodeLog` each share appends its episodes to a trajectory log as they finish (the trainer's
``evaluations/step_<N>.jsonl``). An evaluation cut short (a kill, a crash) and played again on the same
weights keeps what it logged and plays only the rest: every episode is seeded by its place in the panel, so the
results are those of one uninterrupted evaluation.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentgym_core.env import Env
from agentgym_core.evaluation.panel import evaluation_conditions, panel_hash, panel_tasks
from agentgym_core.evaluation.results import EvalResults, build_results
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.rollout.engine import EngineConfig, EnvSource, EpisodeSpec, RolloutEngine, RolloutStats
from agentgym_core.rollout.logs import finished_records, trajectory_from_log_record, trajectory_log_record
from agentgym_core.rollout.progress import RolloutProgress
from agentgym_core.rollout.text_engine import TextRolloutEngine, is_chat_backend
from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["EpisodeLog", "HeldOutEnv", "PanelShare", "evaluate_held_out", "panel_results", "play", "play_panel_share"]


def play(backend: Any, sources: Mapping[str, EnvSource], episodes: Sequence[EpisodeSpec], config: EngineConfig, *,
         desc: str, progress: bool = True, leave: bool = True,
         on_done: Callable[[Trajectory], None] | None = None,
         indices: Sequence[int] | None = None) -> tuple[list[Trajectory], RolloutStats]:
    """Play ``episodes`` (each names its env, a key of ``sources``) with ``backend``; the token engine for a local
    backend, the text engine for an API model. One progress line for all, moving every turn, with the
    successes so far. Returns the trajectories in ``episodes``' order and the engine's statistics.
    ``indices``: each episode's number, which seeds its stream on the token engine (default 0, 1, ...)."""
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

        numbered = {"indices": list(indices)} if indices is not None and engine_cls is RolloutEngine else {}
        trajs = engine.run(list(episodes), on_done=done, on_turn=line.turn, **numbered)
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


@dataclass
class PanelShare:
    """The episodes of a panel one engine played, and what :func:`panel_results` needs to put the panel back
    together (a share travels between processes: plain data only)."""

    positions: list[int]  # each trajectory's place in the whole panel
    trajectories: list[Trajectory]
    panel: dict[str, list[int]]  # the whole panel: env name -> task ids
    config: dict[str, Any]
    conditions: dict[str, Any]
    stats: RolloutStats = field(default_factory=RolloutStats)


@dataclass
class EpisodeLog:
    """Where a share of an evaluation logs its episodes as they finish (a trajectory log, ``step`` in each record),
    and whether the episodes an earlier, interrupted play of it logged there are kept. ``keep`` is for the same
    weights only (a resumed run's evaluation at the step it resumed from); an episode is kept when it was also
    played on the same panel (tasks, sampling, horizon) of the same ``model``. Without ``keep`` the log starts over.
    """

    path: Path
    step: int
    model: str
    keep: bool = False

    def start(self, tag: dict[str, Any], playing: Mapping[tuple[str, int, int], int]) -> dict[int, Trajectory]:
        """Open the log for this play: the episodes kept (panel position -> trajectory) of those ``playing`` names
        (``(env, task id, sample index)`` -> position); the log then holds those only."""
        records = finished_records(self.path) if self.keep else []
        kept: dict[int, dict[str, Any]] = {}
        for record in records:
            key = (str(record.get("env")), int(record["task_id"]), int(record.get("sample_index", 0)))
            if record.get("evaluation") == tag and key in playing:
                kept[playing[key]] = record
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not (self.keep and len(kept) == len(records) and self.path.exists()):  # what is not kept goes
            self.path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept.values()),
                                 encoding="utf-8")
        return {position: trajectory_from_log_record(record) for position, record in kept.items()}

    def append(self, traj: Trajectory, tag: dict[str, Any]) -> None:
        """One finished episode, flushed: a kill after this keeps it."""
        record = {**trajectory_log_record(traj, step=self.step), "evaluation": tag}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def _panel_episodes(envs: Sequence[HeldOutEnv], tasks_per_env: int,
                    samples_per_task: int = 1) -> tuple[dict[str, list[int]], list[EpisodeSpec]]:
    """The panel (env name -> task ids) and its episodes in the panel's order, every env's in turn, each task's
    ``samples_per_task`` samples side by side."""
    panel: dict[str, list[int]] = {}
    episodes: list[EpisodeSpec] = []
    for env in envs:
        panel[env.name] = tasks = panel_tasks(env.test_tasks, tasks_per_env)
        episodes += [EpisodeSpec(task_id=t, sample_index=k, seed=None, category=env.categories.get(t), env=env.name)
                     for t in tasks for k in range(samples_per_task)]
    return panel, episodes


def play_panel_share(backend: Any, envs: Sequence[HeldOutEnv], *, tasks_per_env: int, sampling: SamplingParams,
                     horizon: int, max_total_tokens: int, step_timeout_s: float, desc: str,
                     progress: bool = True, share: tuple[int, int] = (0, 1), samples_per_task: int = 1,
                     log: EpisodeLog | None = None) -> PanelShare:
    """Play the ``share = (i, N)`` of the panel of ``tasks_per_env`` held-out tasks of each env, ``samples_per_task``
    episodes a task: its episodes i, i+N, i+2N, ... (all of them with the default ``(0, 1)``), every env at once,
    at most ``horizon`` turns. Each episode's place in the panel seeds its sampling, so a task's samples differ.
    ``log``: where each episode is logged as it finishes, and whether those an interrupted play logged are kept."""
    index, count = share
    panel, episodes = _panel_episodes(envs, tasks_per_env, samples_per_task)
    positions = list(range(index, len(episodes), count))
    conditions = evaluation_conditions(sampling, horizon=horizon, max_total_tokens=max_total_tokens,
                                       samples_per_task=samples_per_task)
    kept: dict[int, Trajectory] = {}
    on_done: Callable[[Trajectory], None] | None = None
    if log is not None:
        tag = {"panel_hash": panel_hash(panel, conditions), "model": log.model}
        kept = log.start(tag, {(str(episodes[p].env), episodes[p].task_id, episodes[p].sample_index): p
                               for p in positions})
        on_done = functools.partial(log.append, tag=tag)  # each episode as it finishes
        if kept:
            desc += f" (resumed: {len(kept)} kept)"
    to_play = [p for p in positions if p not in kept]
    mine = [episodes[p] for p in to_play]
    concurrency = {env.name: env.max_concurrency for env in envs}
    make_env = {env.name: env.make_env for env in envs}
    sources: dict[str, EnvSource] = {}
    for spec in mine:  # only the envs this share plays, each with no more instances than it has episodes here
        name = str(spec.env)
        sources[name] = EnvSource(make_env[name], min(concurrency[name], sum(e.env == name for e in mine)))
    config = {"tasks_per_env": tasks_per_env, "horizon": horizon, "temperature": sampling.temperature,
              "max_new_tokens": sampling.max_new_tokens, "samples_per_task": samples_per_task}
    result = PanelShare(positions, [], panel, config, conditions)
    played: list[Trajectory] = []
    if mine:
        engine = EngineConfig(sampling=sampling, max_turns=horizon, max_total_tokens=max_total_tokens,
                              step_timeout_s=step_timeout_s,
                              env_workers=sum(source.num_envs for source in sources.values()))
        played, result.stats = play(backend, sources, mine, engine, desc=desc, progress=progress, leave=False,
                                    indices=to_play, on_done=on_done)
    by_position = {**kept, **dict(zip(to_play, played, strict=True))}
    result.trajectories = [by_position[p] for p in positions]
    return result


def panel_results(shares: Sequence[PanelShare], wall_seconds: float) -> EvalResults:
    """The results of a panel from the shares that played it (one share: the whole panel), the trajectories in
    the panel's order; ``wall_seconds``: how long the whole evaluation took."""
    placed = sorted(((p, t) for share in shares for p, t in zip(share.positions, share.trajectories, strict=True)),
                    key=lambda pair: pair[0])
    if [p for p, _ in placed] != list(range(len(placed))):
        raise ValueError(f"panel_results: the shares hold panel positions {[p for p, _ in placed]}; every position "
                         "must be played exactly once (shares (0, N) .. (N-1, N) of one panel)")
    trajs = [t for _, t in placed]
    first = shares[0]
    stats = RolloutStats(gen_seconds=sum(s.stats.gen_seconds for s in shares),
                         sampled_tokens=sum(s.stats.sampled_tokens for s in shares))
    return build_results(trajs, config=first.config,
                         panel_hash=panel_hash(first.panel, first.conditions),
                         timing=_timing(stats, wall_seconds, len(trajs)))


def evaluate_held_out(backend: Any, envs: Sequence[HeldOutEnv], *, tasks_per_env: int, sampling: SamplingParams,
                      horizon: int, max_total_tokens: int, step_timeout_s: float, desc: str,
                      progress: bool = True, samples_per_task: int = 1) -> EvalResults:
    """The panel of ``tasks_per_env`` held-out tasks of each env (:func:`agentgym_core.evaluation.panel.panel_tasks`,
    as ``agentgym eval --limit`` takes them), ``samples_per_task`` episodes each, every env at once, at most
    ``horizon`` turns."""
    start = time.perf_counter()
    share = play_panel_share(backend, envs, tasks_per_env=tasks_per_env, sampling=sampling, horizon=horizon,
                             max_total_tokens=max_total_tokens, step_timeout_s=step_timeout_s, desc=desc,
                             progress=progress, samples_per_task=samples_per_task)
    return panel_results([share], time.perf_counter() - start)


def _timing(stats: RolloutStats, wall: float, n: int) -> dict[str, float]:
    return {"wall_seconds": wall, "gen_seconds": stats.gen_seconds, "sampled_tokens": float(stats.sampled_tokens),
            "trajectories_per_min": 60 * n / wall if wall else 0.0}
