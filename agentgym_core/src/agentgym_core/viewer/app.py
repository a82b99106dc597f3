"""The viewer's HTTP app: a JSON API over :class:`RunIndex` plus the bundled page.

Routes (all GET; runs are named by their path relative to the served root, ``"."`` for the root):

====================================  ============================================================
``/``                                 the page (``assets/index.html``)
``/assets/<file>``                    bundled JS/CSS (only files shipped in ``assets/``)
``/api/runs``                         runs under the root, with kind and change stamp
``/api/run?run=``                     one run: steps, metrics series and their chart sections,
                                      each metric's help (the docs' text), eval results, flat
                                      config, stamp
``/api/stamp?run=``                   the run's change stamp (the page polls it for live updates)
``/api/trajectories?run=&step=``      the summaries of a step's trajectories (``step=-1``: eval)
``/api/trajectory?run=&step=&i=``     one trajectory, turn by turn
``/api/tokens?run=&step=&i=``         its tokens: text, loss mask, log-probs, advantages
``/api/screenshot?run=&step=&i=&turn=``  a WebArena screenshot from the turn's ``info``
``/api/task?run=&env=&task=``         every step that has this task, with its samples (compare)
====================================  ============================================================

User input never becomes a path: runs are looked up by name among discovered runs, steps by
number among the run's files, assets among the shipped files.
"""

from __future__ import annotations

import base64
import binascii
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, JSONResponse, Response

from agentgym_core.viewer.index import EVAL_STEP, RunIndex, discover_runs
from agentgym_core.viewer.layout import chart_sections, quiet_keys
from agentgym_core.viewer.metric_docs import describe
from agentgym_core.viewer.records import detail_record
from agentgym_core.viewer.tokens import TokenDecoder, derived_advantages, token_view

__all__ = ["ASSETS_DIR", "create_viewer_app"]

ASSETS_DIR = Path(__file__).with_name("assets")
_MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_NO_CACHE = {"Cache-Control": "no-cache"}


class _Runs:
    """Discovered runs by name; a name not seen yet triggers one re-discovery (a run just started)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._runs: dict[str, RunIndex] = {}
        self._decoders: dict[str, TokenDecoder] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        with self._lock:
            for name, path in discover_runs(self.root).items():
                self._runs.setdefault(name, RunIndex(path))
            return list(self._runs)

    def get(self, name: str) -> RunIndex:
        if name not in self._runs:
            self.names()
        run = self._runs.get(name)
        if run is None:
            known = ", ".join(repr(n) for n in sorted(self._runs)) or "none"
            raise HTTPException(404, f"no run named {name!r} under {self.root} (runs: {known})")
        return run

    def decoder(self, name: str) -> TokenDecoder:
        with self._lock:
            if name not in self._decoders:
                self._decoders[name] = TokenDecoder(self._runs[name].path)
            return self._decoders[name]


def _step_rows(run: RunIndex, step: int) -> list[dict[str, Any]]:
    try:
        return run.summaries(step)
    except KeyError as exc:
        labels = ", ".join(str(s) for s in run.step_paths()) or "none"
        raise HTTPException(404, f"run has no trajectories for step {step} (steps: {labels})") from exc


def _record(run: RunIndex, step: int, i: int) -> dict[str, Any]:
    _step_rows(run, step)
    try:
        return run.trajectory(step, i)
    except KeyError as exc:
        raise HTTPException(404, str(exc.args[0])) from exc


def _not_trained(index: RunIndex, step: int, raw: dict[str, Any]) -> str | None:
    """Why the sampled tokens of this trajectory were not trained on, when the logs say so (else None)."""
    if step == EVAL_STEP:
        return f"nothing is trained in {'a collection' if index.kind() == 'collect' else 'an evaluation'}"
    train = index.metrics()["train"]
    for at, skipped in zip(train.get("step", []), train.get("skipped_update", []), strict=False):
        if at == step and skipped:
            return "this step's update was skipped (every group tied: no advantage, no optimizer step)"
    if raw.get("failed"):
        return "an environment failure broke this trajectory, so the trainer left it out of the loss"
    return None


def _metric_help(metrics: dict[str, Any]) -> dict[str, str]:
    """Each charted key's text from the docs' metric table (``metric_docs``), for its chart's tooltip."""
    keys = {k for kind in metrics.values() for k in kind if k != "step"}
    return {k: text for k in sorted(keys) if (text := describe(k)) is not None}


def create_viewer_app(root: str | Path) -> FastAPI:
    """The viewer app serving the run (or folder of runs) at ``root``."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory; pass a run directory (or a folder of runs)")
    runs = _Runs(root)
    assets = {p.name: p for p in ASSETS_DIR.iterdir() if p.is_file()}
    app = FastAPI(title="agentgym viewer", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/")
    def page() -> FileResponse:
        return FileResponse(assets["index.html"], media_type=_MEDIA_TYPES[".html"], headers=_NO_CACHE)

    @app.get("/assets/{name:path}")
    def asset(name: str) -> FileResponse:
        path = assets.get(name)
        if path is None:
            raise HTTPException(404, f"no asset named {name!r} (assets: {', '.join(sorted(assets))})")
        return FileResponse(path, media_type=_MEDIA_TYPES.get(path.suffix, "application/octet-stream"),
                            headers=_NO_CACHE)

    @app.get("/api/runs")
    def list_runs() -> dict[str, Any]:
        names = runs.names()
        return {"root": str(root), "runs": [{"name": n, "kind": runs.get(n).kind()} for n in names]}

    @app.get("/api/run")
    def run_overview(run: str = ".") -> dict[str, Any]:
        index = runs.get(run)
        metrics = index.metrics()
        return {"name": run, "path": str(index.path), "kind": index.kind(), "stamp": index.stamp(),
                "steps": index.steps(), "metrics": metrics, "results": index.results(),
                "sections": chart_sections(list(metrics["train"]), list(metrics["eval"]), quiet_keys(metrics)),
                "help": _metric_help(metrics), "config": index.config()}

    @app.get("/api/stamp")
    def stamp(run: str = ".") -> dict[str, str]:
        return {"stamp": runs.get(run).stamp()}

    @app.get("/api/trajectories")
    def trajectories(run: str = ".", step: int = EVAL_STEP) -> JSONResponse:
        index = runs.get(run)
        rows = _step_rows(index, step)
        return JSONResponse({"step": step, "stamp": index.stamp(), "rows": rows})

    @app.get("/api/trajectory")
    def trajectory(run: str = ".", step: int = EVAL_STEP, i: int = 0) -> dict[str, Any]:
        detail = detail_record(_record(runs.get(run), step, i))
        detail.update(i=i, step=step)
        return detail

    @app.get("/api/tokens")
    def tokens(run: str = ".", step: int = EVAL_STEP, i: int = 0) -> dict[str, Any]:
        index = runs.get(run)
        raw = _record(index, step, i)
        training = step != EVAL_STEP
        group = derived_advantages(index.summaries(step)).get(i) if training else None
        return token_view(raw, decoder=runs.decoder(run), group_advantage=group, training=training,
                          not_trained=_not_trained(index, step, raw))

    @app.get("/api/screenshot")
    def screenshot(run: str = ".", step: int = EVAL_STEP, i: int = 0, turn: int = 0) -> Response:
        raw = _record(runs.get(run), step, i)
        turns = raw.get("turns") or []
        if not 0 <= turn < len(turns):
            raise HTTPException(404, f"trajectory {i} has no turn {turn} (it has {len(turns)})")
        shot = (turns[turn].get("info") or {}).get("screenshot")
        if not isinstance(shot, str) or not shot:
            raise HTTPException(404, f"turn {turn} has no screenshot in its info")
        # The env stores either the JPEG itself (base64) or the path of the file it wrote.
        if shot.lower().endswith((".jpg", ".jpeg", ".png")):
            path = Path(shot)
            if not path.is_file():
                raise HTTPException(404, f"the screenshot file {shot} is gone (screenshot='file' keeps them "
                                         "in a temporary folder unless screenshot_dir is set)")
            return FileResponse(path, media_type="image/png" if path.suffix == ".png" else "image/jpeg")
        try:
            data = base64.b64decode(shot.split(",", 1)[-1], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise HTTPException(404, f"turn {turn}'s screenshot is neither a file path nor base64") from exc
        return Response(data, media_type="image/png" if data[:4] == b"\x89PNG" else "image/jpeg")

    @app.get("/api/task")
    def task(run: str = ".", env: str = "", task: int = 0) -> dict[str, Any]:
        index = runs.get(run)
        found = []
        for step in index.step_paths():
            rows = [r for r in index.summaries(step) if r.get("task_id") == task and (not env or r.get("env") == env)]
            if rows:
                found.append({"step": step, "rows": rows})
        return {"env": env, "task_id": task, "steps": found}

    return app
