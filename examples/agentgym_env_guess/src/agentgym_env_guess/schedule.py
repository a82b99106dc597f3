"""A round scheduler with options of its own: how a plugin adds typed settings to a recipe section.

``type: guess_warmup`` plays a short turn budget for the first steps (the guesses a model can
already make), then the recipe's full ``rounds``. Its two settings sit in the same section as the
core's (``algorithm.rounds_ctrl``), typed and documented in :class:`WarmupRoundsConfig`; agentgym
checks a recipe against it (an unknown key gets "did you mean") because the plugin registers the
factory with ``options=WarmupRoundsConfig`` (``plugin.py``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from agentgym_core.schedulers import RoundsConfig


class WarmupRoundsConfig(RoundsConfig):
    """``algorithm.rounds_ctrl`` with ``type: guess_warmup``: the core's keys plus two of its own."""

    warmup_steps: int = Field(10, ge=0, description="Training steps played with the short turn budget.")
    warmup_rounds: int = Field(3, ge=1, description="Turn budget during the warm-up steps.")


class WarmupRounds:
    """``warmup_rounds`` turns for steps ``< warmup_steps``, then the longest of ``rounds``."""

    def __init__(self, config: WarmupRoundsConfig) -> None:
        self.config = config

    def horizon(self, step: int) -> int:
        return self.config.warmup_rounds if step < self.config.warmup_steps else max(self.config.stages)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        return None  # a pure function of the step: nothing to learn, nothing to save

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def make_warmup(config: WarmupRoundsConfig) -> WarmupRounds:
    """The factory agentgym calls with the recipe's ``algorithm.rounds_ctrl`` as a WarmupRoundsConfig."""
    return WarmupRounds(config)


