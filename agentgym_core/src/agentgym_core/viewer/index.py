"""What is in a run directory, read lazily and incrementally.

A *run* is a directory holding any of:

==============================  ==============================================================
``metrics.jsonl``               training metrics, one line per step (``kind`` train or eval)
``trajectories/step_N.jsonl``   the trainer's trajectories of step N (``Trajectory`` dumps)
``rollouts/step_N.jsonl``       rollout logs of step N (``agentgym.trajectory/1``)
``trajectories.jsonl``          an evaluation's rollout log (shown as step ``-1``, "eval"), or a
                                collection's (``agentgym collect``; "collect")
``results.json``                an evaluation's results (``agentgym eval``)
``collect_config.json``         a collection's settings: the run is labelled "collect", not "eval"
``config.yaml``                 the resolved config
==============================  ==============================================================

The directory given to ``agentgym view`` may be one run or a folder of runs (searched two levels
deep). Nothing is read until asked: a step file is indexed (byte offset + a small summary per
line) when its step is first listed, and only the lines appended since are read on later calls,
so a live run costs one ``stat`` per poll. A full trajectory is read by seeking to its offset.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentgym_core.viewer.layout import flatten_config
from agentgym_core.viewer.records import summarize_record

__all__ = ["COLLECT_CONFIG", "EVAL_STEP", "RunIndex", "StepFile", "discover_runs"]

EVAL_STEP = -1
"""The step key of an evaluation's (or a collection's) ``trajectories.jsonl``."""

COLLECT_CONFIG = "collect_config.json"
"""Written by ``agentgym collect`` beside its ``trajectories.jsonl``: what was collected, and how."""

_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")
_MARKERS = ("metrics.jsonl", "results.json", "trajectories.jsonl", "trajectories", "rollouts")


def _is_run(path: Path) -> bool:
    return any((path / marker).exists() for marker in _MARKERS)


def discover_runs(root: str | Path, *, depth: int = 2) -> dict[str, Path]:
    """Runs under ``root``, by name (their path relative to ``root``; ``"."`` for ``root`` itself)."""
    root = Path(root)
    found: dict[str, Path] = {}
    if _is_run(root):
        found["."] = root
    frontier = [root]
    for _ in range(depth):
        next_frontier = []
        for folder in frontier:
            try:
                children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for child in children:
                if child.name in ("trajectories", "rollouts", "checkpoints", "tensorboard", "evaluations"):
                    continue
                if _is_run(child):
                    found[child.relative_to(root).as_posix()] = child
                else:
                    next_frontier.append(child)
        frontier = next_frontier
    return found


@dataclass
class StepFile:
    """One JSONL file of trajectories, indexed as far as it has been read."""

    path: Path
    offsets: list[int] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    indexed_bytes: int = 0
    inode: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def refresh(self) -> list[dict[str, Any]]:
        """Index lines appended since the last call (or everything, if the file was replaced)."""
        with self.lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                self.offsets, self.summaries, self.indexed_bytes, self.inode = [], [], 0, None
                return self.summaries
            if stat.st_ino != self.inode or stat.st_size < self.indexed_bytes:
                self.offsets, self.summaries, self.indexed_bytes, self.inode = [], [], 0, stat.st_ino
            if stat.st_size == self.indexed_bytes:
                return self.summaries
            with self.path.open("rb") as handle:
                handle.seek(self.indexed_bytes)
                chunk = handle.read(stat.st_size - self.indexed_bytes)
            position = self.indexed_bytes
            # Only whole lines: a writer mid-line is picked up at the next refresh.
            end = chunk.rfind(b"\n") + 1
            for line in chunk[:end].split(b"\n")[:-1]:
                start, position = position, position + len(line) + 1
                if not line.strip():
                    continue
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError:
                    summary = {**summarize_record({}), "error": f"unreadable JSON line at byte {start}",
                               "last_action": f"(unreadable JSON line at byte {start})"}
                else:
                    summary = summarize_record(raw)
                summary["i"] = len(self.summaries)
                self.offsets.append(start)
                self.summaries.append(summary)
            self.indexed_bytes = position
            return self.summaries

    def read(self, i: int) -> dict[str, Any]:
        """The full record of trajectory ``i`` (its line, parsed)."""
        self.refresh()
        if not 0 <= i < len(self.offsets):
            raise KeyError(f"trajectory {i} not in {self.path.name} (it has {len(self.offsets)})")
        with self.path.open("rb") as handle:
            handle.seek(self.offsets[i])
            return json.loads(handle.readline())


class RunIndex:
    """The lazily read contents of one run directory (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._files: dict[Path, StepFile] = {}
        self._metrics: tuple[tuple[int, int], dict[str, Any]] | None = None
        self._lock = threading.Lock()

    # -- what is there -------------------------------------------------------------------------
    def step_paths(self) -> dict[int, Path]:
        """Step number -> trajectory file. The trainer's dumps win over rollout logs of the same step."""
        steps: dict[int, Path] = {}
        for folder in ("rollouts", "trajectories"):
            directory = self.path / folder
            if not directory.is_dir():
                continue
            for entry in os.scandir(directory):
                match = _STEP_FILE.match(entry.name)
                if match:
                    steps[int(match.group(1))] = Path(entry.path)
        if (self.path / "trajectories.jsonl").is_file():
            steps[EVAL_STEP] = self.path / "trajectories.jsonl"
        return dict(sorted(steps.items()))

    def kind(self) -> str:
        """``"train"`` (has metrics or step files), ``"collect"`` (``agentgym collect``'s) or ``"eval"``."""
        if (self.path / "metrics.jsonl").exists() or any(k != EVAL_STEP for k in self.step_paths()):
            return "train"
        if (self.path / COLLECT_CONFIG).is_file():
            return "collect"
        return "eval"

    def stamp(self) -> str:
        """Changes whenever a file the viewer shows changes (size or mtime): the live-update signal."""
        parts = []
        files = [self.path / name for name in ("metrics.jsonl", "results.json", "config.yaml")]
        files += list(self.step_paths().values())
        for path in files:
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
        return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]

    def step_file(self, step: int) -> StepFile:
        path = self.step_paths().get(step)
        if path is None:
            raise KeyError(f"no trajectories for step {step} in {self.path}")
        with self._lock:
            if path not in self._files:
                self._files[path] = StepFile(path)
            return self._files[path]

    # -- contents ------------------------------------------------------------------------------
    def summaries(self, step: int) -> list[dict[str, Any]]:
        return list(self.step_file(step).refresh())

    def trajectory(self, step: int, i: int) -> dict[str, Any]:
        return self.step_file(step).read(i)

    def steps(self) -> list[dict[str, Any]]:
        """Every step with trajectories, with counts once its file has been indexed (cheap otherwise)."""
        out = []
        for step, path in self.step_paths().items():
            indexed = self._files.get(path)
            label = ("collect" if self.kind() == "collect" else "eval") if step == EVAL_STEP else str(step)
            row: dict[str, Any] = {"step": step, "label": label,
                                   "file": path.relative_to(self.path).as_posix(), "bytes": path.stat().st_size}
            if indexed is not None and indexed.summaries:
                rows = indexed.summaries
                row["count"] = len(rows)
                row["success"] = sum(r.get("success", False) for r in rows) / len(rows)
            out.append(row)
        return out

    def metrics(self) -> dict[str, Any]:
        """``metrics.jsonl`` as series: ``{"train": {key: [values]}, "eval": {...}}`` (``step`` included)."""
        path = self.path / "metrics.jsonl"
        try:
            stat = path.stat()
        except FileNotFoundError:
            return {"train": {}, "eval": {}}
        key = (stat.st_size, stat.st_mtime_ns)
        if self._metrics is not None and self._metrics[0] == key:
            return self._metrics[1]
        series: dict[str, dict[str, list[Any]]] = {}
        rows: dict[str, list[dict[str, Any]]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            rows.setdefault(str(record.get("kind", "train")), []).append(record)
        for kind, records in rows.items():
            keys = sorted({k for r in records for k, v in r.items()
                           if isinstance(v, (int, float)) and not isinstance(v, bool)})
            series[kind] = {k: [r.get(k) for r in records] for k in keys}
        series.setdefault("train", {})
        series.setdefault("eval", {})
        self._metrics = (key, series)
        return series

    def results(self) -> dict[str, Any] | None:
        """An evaluation's ``results.json`` (None when absent or being written)."""
        try:
            return json.loads((self.path / "results.json").read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def config_text(self) -> str | None:
        path = self.path / "config.yaml"
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def config(self) -> dict[str, Any]:
        """The run's resolved config as flat ``dotted.key -> value`` rows: ``config.yaml`` (training),
        the ``config`` of ``results.json`` or ``eval_config.json`` (evaluation, finished or not) or
        ``collect_config.json`` (collection); ``{}`` when none is there (yet)."""
        text = self.config_text()
        if text is not None:
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                return {"(config.yaml)": f"unreadable YAML: {exc}"}
        else:
            data = (self.results() or {}).get("config")
            for name in ("eval_config.json", COLLECT_CONFIG):
                if data is None and (self.path / name).is_file():
                    try:
                        data = json.loads((self.path / name).read_text(encoding="utf-8"))
                    except (OSError, json.JSONDecodeError):
                        data = None
        return flatten_config(data) if isinstance(data, dict) else {}
