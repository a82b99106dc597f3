"""The two roles the training loop drives, as typed interfaces, and where a launcher puts them.

The loop (:func:`agentgym_core.rl.trainer.train`) talks to a :class:`LearnerRole` and a
:class:`RolloutRole` only. Launchers answer these calls with different objects:

=================  ============================================  ============================================
launcher           learner                                       rollout side
=================  ============================================  ============================================
local, 1 rank      :class:`~agentgym_core.rl.learner.Learner`    :class:`~agentgym_core.rl.rollout_worker.
                                                                 RolloutWorker`
local, N ranks     one FSDP2 rank of the Learner, in each rank   :class:`~agentgym_core.rl.colocated.
                                                                 RankRollouts` in each rank (its slice)
ray                ``RayLearnerGroup`` (the ranks as actors)     ``RayRolloutGroup`` (workers as actors)
=================  ============================================  ============================================

Every rollout worker is built by :func:`~agentgym_core.rl.rollout_worker.build_rollout_worker`,
wherever it runs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the loop's types only: a launcher that places the roles elsewhere imports no torch here
    import torch

    from agentgym_core.rl.batch import RLBatch
    from agentgym_core.rl.curriculum import TaskCurriculum
    from agentgym_core.rl.guards import SyncExpectation
    from agentgym_core.rl.learner import ScoredBatch
    from agentgym_core.rl.rollout_worker import RolloutResult
    from agentgym_core.rl.update import UpdateInputs

__all__ = ["LearnerRole", "PhaseMeter", "PlacedRollouts", "Roles", "RolloutRole", "Unmeasured"]


class LearnerRole(Protocol):
    """Weights, optimizer and checkpoints (every call is collective over the learner ranks)."""

    @property
    def lr(self) -> float:
        """The learning rate of the next optimizer step."""
        ...

    @property
    def weight_sync_bytes(self) -> int | None:
        """Bytes of the weights the last :meth:`rollout_weights` sent (None before the first)."""
        ...

    def score(self, batch: RLBatch, *, temperature: float) -> ScoredBatch:
        """Old and reference log-probs of ``batch``."""
        ...

    def update(self, inputs: UpdateInputs, *, temperature: float, generator: torch.Generator) -> dict[str, float]:
        """One step's PPO update; its metrics."""
        ...

    def step_schedule(self) -> None:
        """Advance the learning-rate schedule by one training step."""
        ...

    def rollout_weights(self, dtype: torch.dtype | None = None) -> Any:
        """The weights the rollout side loads after an update, in ``dtype`` (what the rollout engine holds;
        what :meth:`RolloutRole.load_weights` takes)."""
        ...

    def save(self, run_dir: Path, step: int, *, tokenizer: Any, extra_state: dict[str, Any], keep: int,
             hf_weights: bool = True) -> None:
        """Checkpoint ``step`` under ``run_dir``; sharded learners gather Hugging Face weights only with
        ``hf_weights``."""
        ...

    def load(self, checkpoint: Path) -> dict[str, Any]:
        """Restore a checkpoint; its trainer state."""
        ...


class RolloutRole(Protocol):
    """What the loop samples from: each step's trajectories, evaluations, new weights."""

    @property
    def receives_weights(self) -> bool:
        """Whether the loop must hand it weights after every update (False: it samples the learner's module)."""
        ...

    def collect(self, step: int) -> RolloutResult:
        """Step ``step``'s trajectories (all of them, wherever they were sampled)."""
        ...

    def load_weights(self, weights: Any, probe: SyncExpectation | None = None) -> None:
        """New weights after an update; ``probe``: the sync check to run once they are loaded (rl/guards.py)."""
        ...

    def evaluate(self, horizon: int, step: int, *, resumed: bool = False) -> dict[str, Any]:
        """A held-out evaluation of the current weights, played by every rollout worker (collective: on several
        learner ranks every rank calls it, and every rank gets the record). Its episodes are logged as they finish
        (``evaluations/step_<N>.jsonl``); ``resumed``: the weights are those a resumed run loaded for ``step``, so
        the episodes an interrupted evaluation there logged are kept and only the rest are played."""
        ...


class PlacedRollouts(RolloutRole, Protocol):
    """The rollout side as a launcher places it, before the loop wraps it for dynamic sampling
    (:class:`~agentgym_core.rl.dynamic_sampling.SignalSampling`) or asynchronous rollouts
    (:class:`~agentgym_core.rl.async_rollouts.AsyncRollouts`)."""

    def collect(self, step: int, sampling_round: int = 0) -> RolloutResult:
        """Round ``sampling_round`` of step ``step`` (dynamic sampling asks for more rounds)."""
        ...

    def check_weights(self, probe: SyncExpectation) -> None:
        """The sync check on the weights it holds now (at the start of a run)."""
        ...


class PhaseMeter(Protocol):
    """Peak memory of one phase of a step (:class:`~agentgym_core.training.memory.PhasePeak`)."""

    def start(self) -> PhaseMeter: ...

    def stop(self) -> None: ...

    def __enter__(self) -> PhaseMeter: ...

    def __exit__(self, *exc: object) -> None: ...

    def as_metrics(self, suffix: str = "") -> dict[str, float]:
        """The phase's peaks as metrics named with ``suffix``."""
        ...


class Unmeasured:
    """The meter of a process that holds neither role (the Ray driver): its memory says nothing of the phases."""

    def start(self) -> Unmeasured:
        return self

    def stop(self) -> None:
        """Nothing was measured."""

    def __enter__(self) -> Unmeasured:
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing was measured."""

    def as_metrics(self, suffix: str = "") -> dict[str, float]:
        """No metrics."""
        return {}


class Roles(Protocol):
    """A launcher's placement of the two roles (``trainer.launcher``)."""

    pipelined: bool  # rollouts always go through AsyncRollouts (the rollout side runs elsewhere)
    tokenizer: Any  # saved with checkpoints by the loop (None: the learner saves its own)

    def learner(self, stack: contextlib.ExitStack) -> LearnerRole:
        """The learner, closed by ``stack``."""
        ...

    def rollout_worker(
        self, stack: contextlib.ExitStack, scheduler: Any, curriculum: TaskCurriculum | None
    ) -> PlacedRollouts:
        """This process's rollout side, closed by ``stack``."""
        ...

    def phase_meter(self) -> PhaseMeter:
        """A meter of this process's peak memory in one phase (:class:`Unmeasured` where the roles run
        elsewhere)."""
        ...
