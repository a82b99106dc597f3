"""An observer: how many guesses solved tasks need, per training step, for runs that play ``guess``.

The observer hooks in :mod:`agentgym_env_guess.plugin` feed :data:`tally`; at the end of a run
that trains on ``guess`` it writes ``guess_turns.json`` into the run directory:
``{"<step>": {"solved": n, "mean_turns_when_solved": x}}``. Runs on other environments are left alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class GuessTally:
    """Per-step counts of solved ``guess`` episodes and the turns they took."""

    def __init__(self) -> None:
        self.active = False
        self.steps: dict[int, dict[str, float]] = {}

    def start(self, run_dir: str, config: dict[str, Any]) -> None:
        self.active = any(env.get("name") == "guess" for env in config.get("envs", []))
        self.steps = {}

    def add(self, step: int, trajectories: list[Any]) -> None:
        if not self.active:
            return
        solved = [t.num_turns for t in trajectories if t.env == "guess" and t.success]
        self.steps[step] = {"solved": len(solved),
                            "mean_turns_when_solved": sum(solved) / len(solved) if solved else 0.0}

    def finish(self, run_dir: str) -> None:
        if self.active:
            (Path(run_dir) / "guess_turns.json").write_text(json.dumps(self.steps, indent=2) + "\n")
        self.active = False


tally = GuessTally()
"""The one tally the plugin's observer hooks share (a run at a time per process)."""
