"""Round schedulers: how many turns a trajectory may take at a given training step."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["FixedRounds", "RoundScheduler"]


@runtime_checkable
class RoundScheduler(Protocol):
    def horizon(self, step: int) -> int:
        """Maximum number of agent turns per trajectory at training step ``step`` (0-based)."""
        ...


class FixedRounds:
    """The same horizon at every step (the anchor's ``rounds_ctrl.type=fixed``)."""

    def __init__(self, rounds: int = 20) -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        self.rounds = rounds

    def horizon(self, step: int) -> int:
        return self.rounds
