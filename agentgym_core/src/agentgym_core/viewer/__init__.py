"""The trajectory viewer: ``agentgym view RUN_DIR`` serves a local page over a run directory.

Runs, steps and a chart per logged metric (several runs overlaid, config side by side); a step's
trajectories with filters; one trajectory turn by turn or token by token (loss mask, advantage
sign); the same task at two steps side by side; the view kept in the URL hash; live updates of a
running directory and of runs started later. Plain HTML/CSS/JS shipped in ``assets/`` (no build step, nothing
fetched from the internet); the server is a FastAPI app (:func:`create_viewer_app`).
"""

from __future__ import annotations

from agentgym_core.viewer.app import ASSETS_DIR, create_viewer_app
from agentgym_core.viewer.index import EVAL_STEP, RunIndex, StepFile, discover_runs

__all__ = ["ASSETS_DIR", "EVAL_STEP", "RunIndex", "StepFile", "create_viewer_app", "discover_runs"]
