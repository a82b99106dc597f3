"""The walkthrough expert: replays the command sequence TextWorld writes for each generated game.

It reads the walkthrough from ``reset(...).info["walkthrough"]`` (the environment puts it there when
built with ``include_walkthrough=True``) and only calls ``reset``/``step``, so it plays the same
in-process and over HTTP. The warm start of ``agentgym finetune`` records its episodes for SFT.
"""

from __future__ import annotations

from agentgym_core.env import Env, StepResult

__all__ = ["play_walkthrough"]


def play_walkthrough(env: Env, task_id: int) -> StepResult | None:
    """Reset ``env`` onto ``task_id`` and step through the game's walkthrough until the episode ends."""
    walkthrough = env.reset(task_id).info.get("walkthrough")
    if walkthrough is None:
        raise ValueError(
            "reset info has no 'walkthrough': build the environment with include_walkthrough=True "
            "(env_kwargs={'include_walkthrough': true} for a server)"
        )
    result = None
    for command in walkthrough:
        result = env.step(command)
        if result.done:
            break
    return result
