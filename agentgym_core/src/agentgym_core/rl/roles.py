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
from typing import Any, Protocol

from agentgym_core.rl.batch import RLBatch
from agentgym_core.rl.curriculum import TaskCurriculum
from agentgym_core.rl.rollout_worker import RolloutResult
from agentgym_core.rl.update import UpdateInputs

__all__ = ["LearnerRole", "Roles", "RolloutRole"]


class LearnerRole(Protocol):
    """Weights, optimizer and checkpoints (every call is collective over the learner ranks)."""

    @property
    def lr(self) -> float:
        """The learning rate of the next optimizer step."""
        ...

    def score(self, batch: RLBatch, *, temperature: float) -> Any:
        """Old and reference log-probs of ``batch`` (a :class:`~agentgym_core.rl.learner.ScoredBatch`)."""
        ...

    def update(self, inputs: UpdateInputs, *, temperature: float, generator: Any) -> dict[str, float]:
        """One step's PPO update; its metrics."""
        ...

    def step_schedule(self) -> None:
        """Advance the learning-rate schedule by one training step."""
        ...

    def rollout_weights(self) -> Any:
        """The weights the rollout side loads after an update (what :meth:`RolloutRole.load_weights` takes)."""
        ...

    def save(
        self, run_dir: Path, step: int, *, tokenizer: Any, extra_state: dict[str, Any], keep: int
    ) -> None:
        """Checkpoint ``step`` under ``run_dir``."""
        ...

    def load(self, checkpoint: Path) -> dict[str, Any]:
        """Restore a checkpoint; its trainer state."""
        ...


class RolloutRole(Protocol):
    """Samples each step's trajectories, evaluates, takes weights."""

    @property
    def receives_weights(self) -> bool:
        """Whether the loop must hand it weights after every update (False: it samples the learner's module)."""
        ...

    def collect(self, step: int, sampling_round: int = 0) -> RolloutResult:
        """Step ``step``'s trajectories (all of them, wherever they were sampled)."""
        ...

    def load_weights(self, weights: Any) -> None:
        """New weights after an update."""
        ...

    def evaluate(self, horizon: int, step: int) -> dict[str, Any]:
        """A held-out evaluation of the current weights."""
        ...


class Roles(Protocol):
    """A launcher's placement of the two roles (``trainer.launcher``)."""

    pipelined: bool  # rollouts always go through AsyncRollouts (the rollout side runs elsewhere)
    tokenizer: Any  # saved with checkpoints by the loop (None: the learner saves its own)

    def learner(self, stack: contextlib.ExitStack) -> LearnerRole:
        """The learner, closed by ``stack``."""
        ...

    def rollout_worker(
        self, stack: contextlib.ExitStack, scheduler: Any, curriculum: TaskCurriculum | None
    ) -> RolloutRole:
        """This process's rollout side, closed by ``stack``."""
        ...
