"""Asynchronous rollouts: the rollout side samples the next steps while the learner updates.

A *policy version* counts the updates the sampling weights have taken: on the synchronous path
step ``s`` is sampled by version ``s`` (the weights after steps ``0..s-1``), a lag of 0.
:class:`AsyncRollouts` wraps a rollout worker (the local :class:`~agentgym_core.rl.rollout_worker.
RolloutWorker` or the Ray group of them) and answers the same calls the training loop makes, so the
loop does not change:

* a background thread owns the worker. Before each batch it loads the newest weights the learner
  published, then samples the next step ``n`` — but only once ``n - version <= max_staleness``;
  otherwise it waits for the learner. That gate is the staleness bound: no trajectory is sampled
  more than ``max_staleness`` versions behind the step it is trained at;
* ``collect(step)`` hands over the batch the thread made for ``step`` (waiting for it if needed),
  each trajectory stamped with the version that sampled it, and checks the bound once more;
* ``load_weights`` publishes new weights (a copy of the learner's own tensors, which it keeps
  updating; a snapshot the learner gathered or cast is new already and kept as it is);
* ``evaluate`` lets the thread finish the steps the published weights allow, then evaluates the
  newest weights while it waits; ``stop`` ends the thread.

With ``max_staleness = 0`` the gate lets step ``s`` start only after the weights of step ``s - 1``
arrived, which is the synchronous schedule: the same batches from the same weights.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch

from agentgym_core.rl.weight_sync import WeightSnapshot
from agentgym_core.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from agentgym_core.rl.guards import SyncExpectation
    from agentgym_core.rl.roles import RolloutRole
    from agentgym_core.rl.rollout_worker import RolloutResult

__all__ = ["AsyncRollouts", "StalenessError", "staleness_metrics"]


class StalenessError(RuntimeError):
    """A batch lagged more policy versions behind the learner than ``rollout.max_staleness`` allows."""


def staleness_metrics(trajectories: list[Trajectory], step: int) -> dict[str, float]:
    """Lag in policy versions of the trajectories trained at ``step`` (mean and max).

    Trajectories without a version were sampled synchronously, by the weights of the step before:
    they are stamped ``step`` here (lag 0).
    """
    for t in trajectories:
        if t.policy_version is None:
            t.policy_version = step
    lags = [step - int(t.policy_version) for t in trajectories]  # type: ignore[arg-type]
    return {"staleness_mean": sum(lags) / max(len(lags), 1), "staleness_max": float(max(lags, default=0))}


def _private_copy(weights: Any) -> Any:
    """Weights the learner cannot change any more: tensors of a local state dict are cloned (a
    :class:`~agentgym_core.rl.weight_sync.WeightSnapshot` is made of new tensors, and a Ray object
    reference is immutable: both are kept as they are)."""
    if isinstance(weights, dict) and not isinstance(weights, WeightSnapshot):
        return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in weights.items()}
    return weights


class AsyncRollouts:
    """Samples steps ``first_step..last_step-1`` ahead of the learner, at most ``max_staleness`` versions
    behind it; see the module docstring."""

    receives_weights = True  # the loop must publish every update, even with a backend sharing the module

    def __init__(self, worker: RolloutRole, *, max_staleness: int, first_step: int, last_step: int,
                 stop_timeout_s: float = 60.0) -> None:
        self.worker, self.max_staleness = worker, max_staleness
        self._last_step, self._stop_timeout_s = last_step, stop_timeout_s
        self._cond = threading.Condition()
        self._worker_lock = threading.Lock()  # held while the thread or evaluate uses the worker
        self._published = first_step  # version of the newest weights the learner published
        self._loaded = first_step  # version of the weights the worker holds (under _worker_lock)
        self._pending: Any = None  # the newest published weights, not loaded yet
        self._pending_probe: Any = None  # the sync check of those weights
        self._next = first_step  # next step the thread samples
        self._sampling = False  # the thread has taken a step and not handed its result yet
        self._results: dict[int, Any] = {}  # step -> RolloutResult, or the exception that step raised
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="agentgym-async-rollouts", daemon=True)
        self._thread.start()

    # ---- the loop's calls ---------------------------------------------------------------------------
    def collect(self, step: int) -> RolloutResult:
        """The batch of ``step``, each trajectory stamped with its policy version."""
        with self._cond:
            self._cond.wait_for(lambda: step in self._results or not self._thread.is_alive())
            if step not in self._results:
                raise RuntimeError(f"asynchronous rollouts: the sampling thread ended before step {step}")
            result = self._results.pop(step)
        if isinstance(result, BaseException):
            raise result
        lag = max((step - t.policy_version for t in result.trajectories), default=0)
        if lag > self.max_staleness:
            raise StalenessError(f"step {step}: a trajectory lags {lag} policy versions, more than "
                                 f"rollout.max_staleness={self.max_staleness}")
        return result

    def load_weights(self, weights: Any, probe: SyncExpectation | None = None) -> None:
        """The learner's weights after one more update (the next policy version); ``probe`` (the sync check,
        :mod:`agentgym_core.rl.guards`) is checked when the sampling thread loads them."""
        weights = _private_copy(weights)
        with self._cond:
            self._pending, self._pending_probe = weights, probe
            self._published += 1
            self._cond.notify_all()

    def evaluate(self, horizon: int, step: int, *, resumed: bool = False) -> dict[str, Any]:
        """Held-out evaluation of the newest weights (sampling waits meanwhile).

        It starts once the thread has sampled every step the published weights allow: then every learner rank's
        thread has made the same collectives before the evaluation's own (rl/colocated.py), whatever the timing."""
        with self._cond:
            self._cond.wait_for(lambda: not (self._sampling or self._may_start()) or not self._thread.is_alive())
        with self._worker_lock:
            self._load_newest()
            return self.worker.evaluate(horizon, step=step, resumed=resumed)

    def stop(self) -> None:
        """Stop sampling (a batch in progress finishes first, up to ``stop_timeout_s``); the worker stays open."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=self._stop_timeout_s)

    # ---- the sampling thread ------------------------------------------------------------------------
    def _may_start(self) -> bool:
        return self._next < self._last_step and self._next - self._published <= self.max_staleness

    def _load_newest(self) -> None:
        """Load the newest published weights into the worker (the caller holds ``_worker_lock``)."""
        with self._cond:
            weights, version, probe = self._pending, self._published, self._pending_probe
            self._pending = self._pending_probe = None
        if weights is not None:
            self.worker.load_weights(weights, probe)
        self._loaded = version

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stop or self._may_start())
                if self._stop:
                    return
                step = self._next
                self._next += 1
                self._sampling = True
            result: Any
            with self._worker_lock:
                try:
                    self._load_newest()
                    result = self.worker.collect(step)
                    for t in result.trajectories:
                        t.policy_version = self._loaded
                except BaseException as exc:  # handed to the loop, which raises it at this step
                    result = exc
            with self._cond:
                self._results[step] = result
                self._sampling = False
                self._cond.notify_all()
            if isinstance(result, BaseException):
                return
