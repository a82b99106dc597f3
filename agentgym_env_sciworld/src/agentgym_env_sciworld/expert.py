"""A gold-path expert: replays the action sequence ScienceWorld plans for each task variation.

The engine generates the sequence when a task is loaded with ``generateGoldPath``; the environment
exposes it as ``reset(...).info["gold_actions"]`` when built with ``include_gold_path=True``. The
expert works the same in-process and over HTTP because it only reads that info and calls ``step``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgym_core.env import Env, StepResult

__all__ = ["ExpertEpisode", "GoldPathExpert"]


@dataclass
class ExpertEpisode:
    """What one expert episode did."""

    task_id: int
    actions: list[str] = field(default_factory=list)
    final: StepResult | None = None

    @property
    def score(self) -> float:
        return float(self.final.info.get("score", 0)) if self.final else 0.0

    @property
    def success(self) -> bool:
        return bool(self.final and self.final.success)


class GoldPathExpert:
    """Plays ScienceWorld's gold action sequence on an env built with ``include_gold_path=True``."""

    def play(self, env: Env, task_id: int) -> ExpertEpisode:
        """Reset ``env`` onto ``task_id`` and step through the gold actions until the episode ends."""
        reset = env.reset(task_id)
        gold = reset.info.get("gold_actions")
        if gold is None:
            raise ValueError(
                "reset info has no 'gold_actions': build the environment with include_gold_path=True "
                "(env_kwargs={'include_gold_path': True} for a server)"
            )
        episode = ExpertEpisode(task_id)
        for action in gold:
            episode.actions.append(action)
            episode.final = env.step(action)
            if episode.final.done:
                break
        return episode


def play_gold_path(env: Env, task_id: int) -> ExpertEpisode:
    """:meth:`GoldPathExpert.play` as the ``play(env, task_id)`` function an expert registration takes."""
    return GoldPathExpert().play(env, task_id)
