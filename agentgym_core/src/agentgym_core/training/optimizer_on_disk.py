"""An optimizer's state kept in a file between its steps, so rollouts, evaluations and the forward and
backward passes do not hold it.

AdamW keeps two moments per trainable weight: twice the weights in float32 (1.08 GB for SmolLM2-135M),
needed only inside ``optimizer.step()``. On one learner process (``runtime.optimizer_state_to_disk``)
:meth:`OptimizerStateOnDisk.around_steps` hooks the optimizer so that its state is read back just
before each step and written to a file just after it, then dropped from memory: the micro-batches'
forward and backward passes, where activations and gradients peak, run without it. A checkpoint
reads it back too; the file stays valid until an optimizer step changes the state, so a checkpoint
between two steps reads it without writing it again. The file lives in the
run directory (not ``/tmp``, often memory-backed) and is deleted when the learner closes (without
reading it back: the run's last checkpoint holds the state).

The write runs in a background thread, overlapping the next rollout's first seconds (a 1 GB write
took 1-3 s here); the tensors are freed when it ends. Should it fail (a full disk), the state stays
in memory, as without this option, and a warning says why.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        self.path = Path(path).resolve()
        self.stored = False  # the state is in the file (or being written there), not in optimizer.state
        self._file_current = False  # the file holds (or will hold) exactly the state last stored
        self._writing: threading.Thread | None = None
        self._pending: dict[int, dict] | None = None  # the state being written (freed when the write ends)
        self._unwritten: dict[int, dict] | None = None  # a failed write's state, still in memory
        self.failed = False  # a write failed: the state stays in memory from then on
        self.closed = False  # close() ran: the file is gone
        self._finalizer = weakref.finalize(self, _remove, self.path)  # the file goes with it
        self._hooks: list[torch.utils.hooks.RemovableHandle] = []
        self._paused = False
        self._layout: list[tuple[int, str, Any]] = []  # what the file holds, in order (see _write_raw)

    @classmethod
    def in_run_dir(cls, optimizer: torch.optim.Optimizer, run_dir: str | Path) -> OptimizerStateOnDisk:
        """One for ``optimizer`` with a file of its own in ``run_dir`` (process id and object id in the name:
        a second optimizer on the same run_dir never reads or deletes this one's), hooked around its steps."""
        return cls(optimizer, Path(run_dir) / f"optimizer_state_on_disk.{os.getpid()}.{id(optimizer):x}.pt").around_steps()

    def around_steps(self) -> OptimizerStateOnDisk:
        """Restore the state before every ``optimizer.step()`` and store it after (hooks, removed by
        :meth:`close`); returns self."""
        def before_step(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
            if not self._paused:
                self.restore()

        def after_step(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
            if not self._paused:
                self.changed()
                self.store()

        self._hooks = [self.optimizer.register_step_pre_hook(before_step),
                       self.optimizer.register_step_post_hook(after_step)]
        return self

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The state in memory throughout the block, whatever steps run in it (loading a checkpoint:
        torch's ``set_optimizer_state_dict`` may take a zero-gradient step to create the state first)."""
        self.restore()
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def _params(self) -> list[torch.nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def changed(self) -> None:
        """The state in memory changed (an optimizer step): the next :meth:`store` writes it."""
        self._file_current = False

    def store(self) -> None:
        """Free the state from memory, writing it to the file in the background unless the file holds it."""
        if self.stored or self.failed:
            return
        state = self.optimizer.state
        if not state:  # no step yet: nothing to move
            return
        if not self._file_current:
            self._pending = {i: state[p] for i, p in enumerate(self._params()) if p in state}
            self._writing = threading.Thread(target=self._write, name="agentgym-optimizer-state", daemon=True)
            self._writing.start()
            self._file_current = True
        state.clear()
        self.stored = True

    def _write(self) -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._layout = _write_raw(self._pending, partial)
            os.replace(partial, self.path)
            self._pending = None  # the tensors go (unless restore() took them back meanwhile)
        except Exception as exc:  # noqa: BLE001 -- any failure: keep the state in memory and say so
            self._unwritten, self._pending = self._pending, None
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            warnings.warn(f"runtime.optimizer_state_to_disk: writing {self.path} failed ({exc!r}); the optimizer "
                          "state stays in memory for the rest of the run", RuntimeWarning, stacklevel=1)

    def restore(self) -> None:
        """Bring the state back into memory: from the write still under way (no read), else from the file,
        which stays, matching it, until :meth:`changed`."""
        if not self.stored:
            return
        if self.closed:
            raise RuntimeError(f"the optimizer state stored in {self.path} was dropped when the learner closed; "
                               "load a checkpoint to train on")
        in_flight = self._pending  # taken before the write can end and drop it
        self._wait()
        if self._unwritten is not None:
            by_index, self._unwritten, self.failed = self._unwritten, None, True
        elif in_flight is not None:
            by_index = in_flight
        else:
            by_index = _read_raw(self.path, self._layout)
        params = self._params()
        for i, entry in by_index.items():
            self.optimizer.state[params[i]] = entry
        self.stored = False

    def wait_for_write(self) -> None:
        """Return once a write under way has ended (the state it held is then freed, or kept on failure)."""
        self._wait()

    def _wait(self) -> None:
        if self._writing is not None:
            self._writing.join()
            self._writing = None

    def close(self) -> None:
        """Delete the file: the learner is done. A state still in memory stays; a stored one is dropped,
        not read back (the run's last checkpoint holds it), and :meth:`restore` then refuses."""
        self._wait()
        self._finalizer()
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._pending = self._unwritten = None
        self.closed = True


@dataclass(frozen=True)
class _TensorSlot:
    """A tensor's place in the file: its bytes follow the previous tensor's."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


def _as_bytes(tensor: torch.Tensor) -> Any:
    """A contiguous CPU tensor's memory as a writable byte buffer (no copy)."""
    return tensor.reshape(-1).view(torch.uint8).numpy()


def _write_raw(state: dict[int, dict[str, Any]], path: Path) -> list[tuple[int, str, Any]]:
    """Write every tensor's bytes one after another (no pickling, no checksum: a 1 GB state is a plain
    1 GB write); returns the layout that reads them back: (parameter index, key, a :class:`_TensorSlot`
    or the value itself where it is not a tensor)."""
    layout: list[tuple[int, str, Any]] = []
    with open(path, "wb") as f:
        for index, entry in state.items():
            for key, value in entry.items():
                if isinstance(value, torch.Tensor):
                    f.write(_as_bytes(value.detach().to("cpu").contiguous()))
                    value = _TensorSlot(tuple(value.shape), value.dtype, value.device)
                layout.append((index, key, value))
    return layout


def _read_raw(path: Path, layout: list[tuple[int, str, Any]]) -> dict[int, dict[str, Any]]:
    """The state :func:`_write_raw` wrote to ``path`` with ``layout``."""
    state: dict[int, dict[str, Any]] = {}
    with open(path, "rb") as f:
        for index, key, value in layout:
            if isinstance(value, _TensorSlot):
                tensor = torch.empty(value.shape, dtype=value.dtype)
                want = tensor.numel() * tensor.element_size()
                if f.readinto(_as_bytes(tensor)) != want:
                    raise OSError(f"{path} ends before the optimizer state it should hold")
                value = tensor.to(value.device)
            state.setdefault(index, {})[key] = value
    return state


def _remove(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + ".partial")):
        with contextlib.suppress(OSError):
            leftover.unlink(missing_ok=True)
