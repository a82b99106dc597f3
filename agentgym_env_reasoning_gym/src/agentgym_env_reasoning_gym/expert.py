"""The gold-answer expert: replies with the generator's own answer, computed here from the task id.

The answer never travels through the environment (it is regenerated from reasoning-gym on the
expert's side, deterministically), so the expert plays the same in-process and over HTTP.
"""

from __future__ import annotations

from agentgym_core.env import Env, StepResult
from agentgym_env_reasoning_gym.env import gold_answer

__all__ = ["play_gold_answer"]


def play_gold_answer(env: Env, task_id: int) -> StepResult:
    """Reset ``env`` onto ``task_id`` and answer with the generator's gold answer.

    With ``datasets=[...]`` the catalog is the environment's own, so the expert reads it from ``env``:
    it plays such an environment in-process (an HTTP client does not carry the entries).
    """
    env.reset(task_id)
    return env.step(f"<answer>{gold_answer(task_id, getattr(env, 'datasets', None) or None)}</answer>")
