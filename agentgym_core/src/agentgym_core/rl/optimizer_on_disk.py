"""An optimizer's state kept in a file between updates, so rollouts and evaluations do not hold it.

AdamW keeps two moments per trainable weight: twice the weights in float32 (1.08 GB for SmolLM2-135M),
needed only inside an update. On one learner process (``trainer.optimizer_state_to_disk``) the
learner writes them to a file after each update and drops them from memory, and reads them back
before the next update or checkpoint; the file stays valid until an optimizer step changes the
state, so a checkpoint between two updates reads it without writing it again. The file lives in the
run directory (not ``/tmp``, often memory-backed) and is deleted when the learner is.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

import torch

__all__ = ["OptimizerStateOnDisk"]


class OptimizerStateOnDisk:
    """``optimizer``'s per-parameter state, moved to ``path`` by :meth:`store` and back by :meth:`restore`.

    Call :meth:`changed` after an optimizer step (the file no longer matches the state in memory).
    Parameter groups, hyper-parameters and the LR schedule stay in memory; only ``optimizer.state``
    (the per-parameter tensors) moves.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, path: Path) -> None:
        self.optimizer = optimizer
        self.path = Path(path)
        self.stored = False  # the state is in the file, not in memory
        self._file_current = False  # the file holds exactly the state now in memory
        self._finalizer = weakref.finalize(self, self.path.unlink, missing_ok=True)  # the file goes with it

    def _params(self) -> list[torch.nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def changed(self) -> None:
        """The state in memory changed (an optimizer step): the next :meth:`store` writes it."""
        self._file_current = False

    def store(self) -> None:
        """Write the state to the file (unless it already holds it) and free it from memory."""
        if self.stored:
            return
        state = self.optimizer.state
        if not state:  # no step yet: nothing to move
            return
        if not self._file_current:
            by_index = {i: state[p] for i, p in enumerate(self._params()) if p in state}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(self.path.name + ".partial")
            torch.save(by_index, partial)
            os.replace(partial, self.path)
            self._file_current = True
        state.clear()
        self.stored = True

    def restore(self) -> None:
        """Read the state back into memory (the file stays, matching it, until :meth:`changed`)."""
        if not self.stored:
            return
        by_index = torch.load(self.path, weights_only=True)
        params = self._params()
        for i, entry in by_index.items():
            self.optimizer.state[params[i]] = entry
        self.stored = False
