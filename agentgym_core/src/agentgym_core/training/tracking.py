"""Metrics out: JSONL (always), TensorBoard (when installed), wandb (when installed and asked)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

__all__ = ["MetricsWriter"]

_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Warn about ``message`` once per process (a run and its warm start must not repeat it)."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


class MetricsWriter:
    """Appends one JSON object per step to ``metrics.jsonl`` and mirrors scalars to TB / wandb.

    Lines are labelled with the number of completed steps. On resume from a checkpoint taken after
    ``resume_step`` steps, lines labelled later are dropped first (they belong to steps that were
    lost), so the file reads as one uninterrupted run.
    """

    def __init__(self, run_dir: str | Path, *, tensorboard: bool = True, wandb_project: str | None = None,
                 config: dict[str, Any] | None = None, resume_step: int | None = None) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", -1) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        self._tb = None
        self._wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except ImportError:  # tensorboard is optional, but a setting that does nothing must say so
                self._tb = None
                _warn_once("trainer.tensorboard is true but TensorBoard is not installed, so only metrics.jsonl "
                           "is written; pip install tensorboard, or set trainer.tensorboard: false")
        if wandb_project:
            try:
                import wandb
            except ImportError as exc:
                raise RuntimeError("trainer.wandb_project is set but wandb is not installed: pip install wandb") from exc
            self._wandb = wandb.init(project=wandb_project, config=config, dir=str(run_dir))

    def forget(self, step: int, *, kind: str) -> None:
        """Drop the lines of ``kind`` labelled ``step`` (a resumed run's evaluation played again, logged anew)."""
        if self.path.exists():
            lines = [line for line in self.path.read_text().splitlines() if line.strip()]
            rows = [json.loads(line) for line in lines]
            kept = [line for line, row in zip(lines, rows, strict=True)
                    if (row.get("step"), row.get("kind", "train")) != (step, kind)]
            if len(kept) != len(lines):
                self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, step: int, metrics: dict[str, Any], *, kind: str = "train") -> None:
        record = {"step": step, "kind": kind, **metrics}
        with self.path.open("a") as f:
            f.write(json.dumps(record, default=float) + "\n")
            f.flush()
        scalars = {f"{kind}/{k}": float(v) for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
