"""How an environment's AgentGym server names things: the ``agentgym_compat`` an Env class declares.

Kept apart from the routes (:mod:`agentgym_core.http.compat`) so that defining an environment does not
import the web framework: ``agentgym envs`` and trainers that only step envs in process stay light.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["AgentGymCompat"]


class AgentGymCompat(BaseModel):
    """How one environment's AgentGym server names things."""

    env_class: str | None = Field(
        default=None, description="'module:Class' of the environment the compatibility routes build instead of the "
        "registered class: its AgentGym personality (the anchor's text and rules), a subclass kept apart from the "
        "native environment. None: the registered class, built with env_kwargs.")
    id_field: str = Field(default="id", description="Instance id in requests and in /create's answer.")
    task_field: str = Field(default="data_idx", description="Task index field of /reset (and /create).")
    action_field: str = Field(default="action", description="Action text field of /step.")
    done_field: str = Field(default="done", description="Episode-ended flag in /reset and /step answers.")
    include_score: bool = Field(default=True, description="Answers carry 'score', the cumulative reward.")
    errors_as_200: bool = Field(default=True, description="Errors answer HTTP 200 {'error': msg} as AgentGym does.")
    create_resets: bool = Field(
        default=False,
        description="/create resets the new instance and answers with the first observation: onto the body's "
                    "task field, or, when absent, onto task index = how many instances this server created "
                    "before it (AgentGym's TextCraft, whose ids are that count).",
    )
    wrap_task_index: bool = Field(
        default=False, description="Task indices wrap modulo the number of tasks (AgentGym's TextCraft does)."
    )
    create_answer: Literal["object", "bare_id"] = Field(
        default="object", description="/create answers {id_field: n} ('object') or the bare number (searchqa)."
    )
    reset_answer: Literal["episode", "observation", "text"] = Field(
        default="episode",
        description="/reset answers {observation, reward, done, ...} ('episode'), {'observation'} alone "
                    "('observation', WebArena) or the bare observation string ('text', searchqa).",
    )
    reset_fields: tuple[str, ...] | None = Field(
        default=None,
        description="Fields of an 'episode' /reset answer, in order: any of id (the instance id), observation, "
                    "reward, score, deleted (always false), done. None: observation, reward, score (when "
                    "include_score), done.",
    )
    close_answer: Literal["object", "bool"] = Field(
        default="object", description="/close answers {id_field, 'closed'} or a bare true (searchqa)."
    )
    reset_observation_key: str | None = Field(
        default=None, description="Reset-info key whose value is /reset's 'observation' (default: the observation)."
    )
    reset_info_fields: dict[str, str] = Field(
        default_factory=dict, description="Extra /reset answer fields: answer field -> reset-info key."
    )
    step_extra_fields: tuple[str, ...] = Field(
        default=(), description="StepResult fields added to /step answers, e.g. ('truncated', 'info')."
    )
    step_info_fields: dict[str, str] = Field(
        default_factory=dict,
        description="/step answer fields whose value is taken from the step's info instead (answer field -> "
                    "info key), kept in their place, e.g. SciWorld's engine score, which goes negative when a "
                    "task fails where the native reward stops at 0.",
    )
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Constructor options for instances created through these routes (on top of the server's), "
                    "e.g. the option that makes observations read exactly like AgentGym's.",
    )
    observation_method: str | None = Field(
        default=None,
        description="Name of an Env method whose return value GET /observation answers (AgentGym's BabyAI "
                    "answers a status object with the goal, reward, score and done); None: the latest "
                    "observation text.",
    )
    step_after_done: bool = Field(
        default=False,
        description="/step keeps answering after the episode ended, as AgentGym's TextCraft does (its client "
                    "raises on an error answer); the native /v1 routes still answer 409.",
    )
