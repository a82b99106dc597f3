"""The rollout role: a backend, one rollout engine over every environment, and the environments' pools.

A :class:`RolloutWorker` turns a training step into trajectories (``group_size`` samples of each of
the step's tasks, the horizon from the round scheduler; the tasks from per-epoch shuffles or, with
``rollout.curriculum``, drawn by category: :mod:`agentgym_core.rl.curriculum`), evaluates the
current policy on held-out tasks, and takes new weights after each update. It owns no optimizer
and no learner state, so the loop can place it apart from the learner ranks.

The environments of a run sample concurrently: one engine plays every environment's episodes of
the step (each environment with its own ``max_concurrency`` instances), so they share the model's
batch. An episode whose trajectory the environment broke (``failed``) is played again, up to
``rollout.rerun_failed`` times; the failed attempt is kept (the trainer counts it as
``infra_failed`` and leaves it out of the loss), so nothing is dropped silently.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from agentgym_core.evaluation.held_out import PanelShare
from agentgym_core.http.pool import ServerCounts
from agentgym_core.rl.batch import allocate_tasks, step_seed, tasks_for_step
from agentgym_core.rl.config import TrainConfig
from agentgym_core.rl.curriculum import TaskCurriculum, tasks_by_category
from agentgym_core.rl.envs import EnvHandle, evaluate, evaluation_share, make_backend, open_envs
from agentgym_core.rl.guards import SyncExpectation
from agentgym_core.rollout.backend import close_backend
from agentgym_core.rollout.engine import EngineConfig, EnvSource, EpisodeSpec, RolloutEngine, RolloutStats
from agentgym_core.rollout.progress import RolloutProgress
from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["RolloutResult", "RolloutWorker", "build_rollout_worker", "merge_slices", "server_metrics", "shard_bounds"]


@dataclass
class RolloutResult:
    """One step's trajectories and where the time went."""

    trajectories: list[Trajectory]  # every attempt, failed ones and their re-runs included
    seconds: float  # wall time of the whole rollout
    generation_seconds: float  # wall time inside generation calls
    generation_calls: int
    metrics: dict[str, float] = field(default_factory=dict)  # re-runs and per-server counts of this step
    workers: list[int] = field(default_factory=list)  # which worker sampled each trajectory (merged slices)


class RolloutWorker:
    """Samples a step's trajectories, evaluates, and takes weights; see the module docstring."""

    def __init__(self, config: TrainConfig, envs: list[EnvHandle], backend: Any, *, scheduler: Any,
                 receives_weights: bool, shard: tuple[int, int] = (0, 1),
                 curriculum: TaskCurriculum | None = None, progress: bool = False) -> None:
        self.config, self.envs, self.backend = config, envs, backend
        self.progress = progress  # a console line per step's rollout that moves every turn
        self.curriculum = curriculum  # None: every env's tasks in per-epoch shuffles of its train split
        self.task_categories = {env.name: tasks_by_category(env.train_tasks, env.categories) for env in envs}
        self.receives_weights = receives_weights
        self.shard = shard  # (i, M): this worker rolls out the i-th of M contiguous slices of a step's episodes
        rollout = config.rollout
        sources = {env.name: EnvSource(env.make_env, env.config.max_concurrency) for env in envs}
        self.engine = RolloutEngine(
            backend, sources, scheduler=scheduler,
            config=EngineConfig(max_total_tokens=rollout.max_total_tokens, step_timeout_s=rollout.env_timeout_s,
                                env_workers=sum(env.config.max_concurrency for env in envs),
                                end_on_invalid_action=rollout.end_on_invalid_action,
                                sampling=rollout.train_sampling()))
        self._probe_scores: list[float] | None = None  # the backend's score of the sync probe after the last sync
        self._probe_unsupported = False
        self.task_counts = allocate_tasks(rollout.tasks_per_step, [e.config.weight for e in envs])
        self._syncs_reported = 0  # the backend's weight_syncs records already in a step's metrics

    def collect(self, step: int, sampling_round: int = 0) -> RolloutResult:
        """``group_size`` samples of each of step ``step``'s tasks, every environment at once.

        The tasks and the sampling seed are pure functions of (seed, step, sampling_round), so a
        resumed run samples exactly what an uninterrupted one did. Round 0 is the step's own
        schedule of tasks; later rounds (dynamic sampling) draw from schedules of their own. With a
        curriculum the tasks also depend on its counts, which change only between steps: every
        round of a step draws with the same weights.
        """
        seed, group = self.config.trainer.seed, self.config.rollout.group_size
        episodes: list[EpisodeSpec] = []
        for env, n in zip(self.envs, self.task_counts, strict=True):
            label = env.name if sampling_round == 0 else f"{env.name}:round{sampling_round}"
            tasks = tasks_for_step(env.train_tasks, n, step, seed, label) if self.curriculum is None else \
                self.curriculum.tasks_for_step(env.name, self.task_categories[env.name], n, step, seed, label)
            episodes += [EpisodeSpec(task_id=t, seed=None, sample_index=k, category=env.categories.get(t),
                                     env=env.name) for t in tasks for k in range(group)]
        engine = self.engine
        rounds = () if sampling_round == 0 else (f"round{sampling_round}",)
        engine.config.sampling.seed = step_seed(seed, "sampling", *(env.name for env in self.envs), *rounds, step)
        # Per-step stats; the engine also offsets its seed by its run count (re-runs of failed episodes),
        # which must restart each step for a resumed run to sample what an uninterrupted one did.
        engine.stats = RolloutStats()
        before = {env.name: env.pool.snapshot() for env in self.envs}
        start = time.perf_counter()
        lo, hi = shard_bounds(len(episodes), *self.shard)  # this worker's slice of the step (Ray: 1 of M)
        mine = episodes[lo:hi]
        label = f"rollout step {step}" + (f" round {sampling_round}" if sampling_round else "")
        with RolloutProgress(len(mine), desc=label, max_turns=engine._turn_budget(step), enabled=self.progress,
                             leave=False) as line:
            trajectories, reruns, lost = self._run_with_reruns(mine, step, first_index=lo, line=line)
        seconds = time.perf_counter() - start
        metrics = {"reruns": float(reruns), "failed_after_reruns": float(lost)}
        for env in self.envs:
            metrics.update(server_metrics(env.name, before[env.name], env.pool.snapshot(), seconds))
            if self.curriculum is not None:  # the curriculum this step's tasks were drawn from
                metrics.update(self.curriculum.metrics(env.name, list(self.task_categories[env.name])))
        metrics.update(self._transport_metrics())
        return RolloutResult(trajectories, seconds, engine.stats.gen_seconds, engine.stats.generation_calls, metrics)

    def _transport_metrics(self) -> dict[str, float]:
        """``weight_sync_bytes_<name>``: the bytes each weight transport carried to this worker's engine for
        the weights this step samples with, from a backend that records its syncs (``weight_syncs`` entries
        naming a ``transport``, as vLLM's server mode keeps them); nothing from other backends."""
        syncs = getattr(self.backend, "weight_syncs", None)
        if not isinstance(syncs, list):
            return {}
        out: dict[str, float] = {}
        for sync in syncs[self._syncs_reported:]:
            if isinstance(sync, dict) and "transport" in sync:
                key = f"weight_sync_bytes_{sync['transport']}"
                out[key] = out.get(key, 0.0) + float(sync.get("bytes", 0.0))
        self._syncs_reported = len(syncs)
        return out

    def _run_with_reruns(self, episodes: list[EpisodeSpec], step: int, first_index: int,
                         line: RolloutProgress) -> tuple[list[Trajectory], int, int]:
        """Every attempt (failed ones kept), how many episodes were re-run, and how many failed every attempt."""
        indices = list(range(first_index, first_index + len(episodes)))  # each episode's number in the step
        attempts = self.engine.run(episodes, step=step, indices=indices, on_turn=line.turn, on_done=line.done)
        trajectories, reruns = list(attempts), 0
        for _ in range(self.config.rollout.rerun_failed):
            # A re-run keeps each episode's number, so its seed is the one it gets on any worker.
            failed = [(spec, i) for spec, i, traj in zip(episodes, indices, attempts, strict=True)
                      if traj.failed]
            if not failed:
                break
            episodes, indices = [spec for spec, _ in failed], [i for _, i in failed]
            reruns += len(episodes)
            line.add(len(episodes))
            attempts = self.engine.run(episodes, step=step, indices=indices, on_turn=line.turn, on_done=line.done)
            trajectories += attempts
        return trajectories, reruns, sum(traj.failed for traj in attempts)

    @property
    def sampling_setup(self) -> dict[str, str]:
        """What the backend samples on (its optional ``sampling_setup``: device, kernels), empty when it does not say."""
        return {str(k): str(v) for k, v in (getattr(self.backend, "sampling_setup", None) or {}).items()}

    def evaluate(self, horizon: int, step: int, *, resumed: bool = False) -> dict[str, Any]:
        """Held-out evaluation of the current policy (see :func:`agentgym_core.rl.envs.evaluate`)."""
        return evaluate(self.backend, self.envs, self.config, horizon, step=step, resumed=resumed)

    def evaluate_share(self, horizon: int, step: int, share: tuple[int, int], resumed: bool = False) -> PanelShare:
        """This worker's ``share = (i, N)`` of a held-out evaluation that N workers play together (the panel's
        episodes i, i+N, ...); :func:`agentgym_core.rl.envs.evaluation_record` makes the record of all shares."""
        return evaluation_share(self.backend, self.envs, self.config, horizon, step, share, resumed=resumed)

    def load_weights(self, state_dict: dict[str, Any], probe: SyncExpectation | None = None) -> None:
        """New policy weights after an update (nothing to do when the backend samples the trainer's module);
        with ``probe``, then checked as :meth:`check_weights` does."""
        if self.receives_weights:
            self.backend.load_weights(state_dict)
            if probe is not None:
                self.check_weights(probe)

    def check_weights(self, probe: SyncExpectation) -> None:
        """Raise :class:`~agentgym_core.rl.guards.WeightSyncError` unless the backend scores the probe as the
        learner did (and, after a learner update, differently from the last time). A backend that cannot score
        is not checked (said once)."""
        if self._probe_unsupported:
            return
        try:
            self._probe_scores = probe.check(self.backend, self._probe_scores)
        except NotImplementedError as exc:
            self._probe_unsupported = True
            warnings.warn(f"rollout.sync_check_tolerance: the {type(self.backend).__name__} backend cannot score "
                          f"sequences ({exc}), so weight syncs are not checked", stacklevel=2)

    def close(self) -> None:
        self.engine.close()


def build_rollout_worker(stack: contextlib.ExitStack, pm: Any, config: TrainConfig, *, scheduler: Any,
                         curriculum: TaskCurriculum | None, shard: tuple[int, int] = (0, 1), model: Any = None,
                         tokenizer: Any = None, private_copy: bool = False, progress: bool = False) -> RolloutWorker:
    """A rollout worker with its backend and environment clients, closed by ``stack``: what each local
    learner rank and each Ray rollout actor runs.

    ``shard``: (i, M), this worker samples the i-th of M slices of every step's episodes. ``model``:
    a module for a backend that samples from one (None: the backend loads ``model.path``);
    ``private_copy``: that module is the rollout side's own copy, so it takes new weights after every
    update (otherwise a sharing backend samples the learner's own module and takes none). ``progress``:
    show each step's rollout as a console line that moves every turn. The backend closes with ``stack``
    (:func:`~agentgym_core.rollout.backend.close_backend`).
    """
    backend, shares = make_backend(pm, config, model, tokenizer)
    stack.callback(close_backend, backend)  # after the worker's own close (the stack unwinds in reverse)
    envs = stack.enter_context(open_envs(pm, config.envs, timeout_s=config.rollout.env_timeout_s))
    worker = RolloutWorker(config, envs, backend, scheduler=scheduler, receives_weights=private_copy or not shares,
                           shard=shard, curriculum=curriculum, progress=progress)
    stack.callback(worker.close)
    return worker


def merge_slices(parts: list[RolloutResult], env_order: list[str], seconds: float) -> RolloutResult:
    """One step's result from the workers' slices (in slice order): trajectories as one worker orders them
    (environment by environment), counts and rates summed, ``down`` flags and the curriculum's whole-step
    figures taken once, ``rollout_episodes/worker{i}``: the episodes each slice sampled, and ``workers``: the
    slice each trajectory came from."""
    trajectories = [t for env in env_order for part in parts for t in part.trajectories if t.env == env]
    workers = [i for env in env_order for i, part in enumerate(parts) for t in part.trajectories if t.env == env]
    metrics: dict[str, float] = {}
    for part in parts:
        for key, value in part.metrics.items():
            whole_step = key.endswith("/down") or key.startswith("curriculum/")
            metrics[key] = max(metrics.get(key, 0.0), value) if whole_step else metrics.get(key, 0.0) + value
    for i, part in enumerate(parts):
        metrics[f"rollout_episodes/worker{i}"] = float(len(part.trajectories))
    return RolloutResult(trajectories, seconds, sum(p.generation_seconds for p in parts),
                         sum(p.generation_calls for p in parts), metrics, workers)


def server_metrics(env: str, before: list[ServerCounts], after: list[ServerCounts], seconds: float) -> dict[str, float]:
    """One step's per-server figures of ``env``'s pool: ``pool/{env}/s{i}/...`` with i the position in its urls.

    ``steps_per_s`` (env steps it answered over the rollout's wall time), ``errors`` (calls it failed
    to answer this step), ``instances`` (placed on it this step), ``down`` (1 if marked down at the end).
    """
    out: dict[str, float] = {}
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        key = f"pool/{env}/s{i}"
        out[f"{key}/steps_per_s"] = (new.steps - old.steps) / seconds if seconds > 0 else 0.0
        out[f"{key}/errors"] = float(new.errors - old.errors)
        out[f"{key}/instances"] = float(new.created - old.created)
        out[f"{key}/down"] = float(new.down)
    return out


def shard_bounds(n: int, index: int, count: int) -> tuple[int, int]:
    """``[lo, hi)`` of the ``index``-th of ``count`` contiguous slices of ``n`` items (sizes differ by <= 1)."""
    return index * n // count, (index + 1) * n // count
