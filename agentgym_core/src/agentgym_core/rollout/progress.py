"""A console progress line for rollouts that moves every turn, not only when a trajectory ends.

A trajectory of a small model on a CPU can take minutes, and all of them may finish together, so a
bar counted in trajectories says ``0/5 [08:29<?, ?traj/s]`` for most of a run. This line counts
what happens every few seconds instead::

    eval babyai: 1/5 traj [02:10, 23 turns, 41.2 tok/s, ~6:05 left, success 100%]

``turns`` are replies sampled so far; ``tok/s`` the sampled tokens over the wall time so far; the
time left is the turns still expected over the turn rate so far. Until a trajectory has finished,
each is expected to use its whole turn budget, and the estimate says ``at most``; afterwards the
mean turns of finished trajectories is the expectation.

The engines call :meth:`RolloutProgress.turn` after every reply (``on_turn``) and
:meth:`RolloutProgress.done` once per finished trajectory (``on_done``); both may come from
several threads, one call at a time (the text engine holds its lock).
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from agentgym_core.rollout.trajectory import Trajectory, Turn

__all__ = ["RolloutProgress", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``M:SS``, or ``H:MM:SS`` from an hour on."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _sampled_tokens(turn: Turn) -> int:
    """Tokens the model sampled in ``turn`` (a text backend's turn has the server's count instead of a span)."""
    reported = getattr(turn, "completion_tokens", None)
    return int(reported) if reported is not None else len(turn.action_span)


class RolloutProgress:
    """The progress line of one rollout of ``total`` trajectories (see the module docstring).

    Args:
        total: trajectories the rollout will finish.
        desc: what runs, e.g. ``eval babyai``.
        max_turns: the turn budget per trajectory (the time-left bound before any has finished).
        enabled: False draws nothing (the counters still count).
        leave: keep the line on screen when closed.
        tokens: show the sampling rate (False for experts, whose turns are not sampled).
        min_interval_s: redraw at most this often on turns (every finished trajectory redraws).
        file: where to draw (default stderr).
    """

    def __init__(
        self,
        total: int,
        *,
        desc: str,
        max_turns: int,
        enabled: bool = True,
        leave: bool = True,
        tokens: bool = True,
        min_interval_s: float = 0.5,
        file: TextIO | None = None,
    ) -> None:
        from tqdm import tqdm

        self.total, self.max_turns, self.show_tokens = total, max_turns, tokens
        self.min_interval_s = min_interval_s
        self.turns = self.tokens = self.finished = self.finished_turns = 0
        self.extra: dict[str, Any] = {}
        self._in_flight: dict[int, int] = {}  # id(trajectory) -> turns taken, while it runs
        self._start = time.perf_counter()
        self._drawn = 0.0
        self.bar = tqdm(
            total=total,
            desc=desc,
            disable=not enabled,
            leave=leave,
            dynamic_ncols=True,
            file=file,
            bar_format="{desc}: {n_fmt}/{total_fmt} traj [{elapsed}{postfix}]",
        )

    # -- engine callbacks ----------------------------------------------------------------------
    def turn(self, traj: Trajectory) -> None:
        """A reply of ``traj`` was sampled."""
        self.turns += 1
        self.tokens += _sampled_tokens(traj.turns[-1]) if traj.turns else 0
        self._in_flight[id(traj)] = traj.num_turns
        if time.perf_counter() - self._drawn >= self.min_interval_s:
            self._draw()

    def done(self, traj: Trajectory, **extra: Any) -> None:
        """``traj`` finished; ``extra`` items (e.g. ``success="40%"``) join the line."""
        if self._in_flight.pop(id(traj), None) is None:  # no turn was reported (an expert plays it whole)
            self.turns += traj.num_turns
            self.tokens += sum(_sampled_tokens(t) for t in traj.turns)
        self.finished += 1
        self.finished_turns += traj.num_turns
        self.extra.update(extra)
        self.bar.set_postfix_str(self.status(), refresh=False)  # the count and its counters in one frame
        self.bar.update(1)
        self._draw()

    def add(self, trajectories: int) -> None:
        """``trajectories`` more will finish than first said (e.g. failed episodes played again)."""
        self.total += trajectories
        self.bar.total = self.total
        self._draw()

    def close(self) -> None:
        self._draw()
        self.bar.close()

    # -- the line --------------------------------------------------------------------------------
    def seconds_left(self) -> tuple[float | None, bool]:
        """(estimated seconds left, whether it is an upper bound); None before the first turn."""
        elapsed = time.perf_counter() - self._start
        if self.turns == 0 or elapsed <= 0:
            return None, False
        bound = self.finished == 0
        per_trajectory = self.max_turns if bound else self.finished_turns / self.finished
        not_started = max(0, self.total - self.finished - len(self._in_flight))
        remaining = not_started * per_trajectory + sum(
            max(per_trajectory - taken, 1.0) for taken in self._in_flight.values()
        )
        return remaining / (self.turns / elapsed), bound

    def status(self) -> str:
        """The line's counters: turns, tokens/s, time left and the extra items."""
        elapsed = time.perf_counter() - self._start
        parts = [f"{self.turns} turn{'s' if self.turns != 1 else ''}"]
        if self.show_tokens:
            parts.append(f"{self.tokens / elapsed:.1f} tok/s" if self.tokens and elapsed > 0 else "? tok/s")
        left, bound = self.seconds_left()
        if self.finished < self.total:
            parts.append(
                "? left" if left is None else f"{'at most ' if bound else '~'}{format_seconds(left)} left"
            )
        parts += [f"{key} {value}" for key, value in self.extra.items()]
        return ", ".join(parts)

    def _draw(self) -> None:
        self._drawn = time.perf_counter()
        self.bar.set_postfix_str(self.status(), refresh=True)

    def __enter__(self) -> RolloutProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
