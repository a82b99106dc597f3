"""Typed configuration of the SciWorld environment (``SciWorldEnv(**config)`` or ``env_kwargs``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SciWorldConfig"]


class SciWorldConfig(BaseModel):
    """Options of one SciWorld environment instance. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(
        default=100, ge=1,
        description="Actions per episode before it is truncated (ScienceWorld's own default is 100).",
    )
    agentgym_style: bool = Field(
        default=False,
        description="Play episodes as AgentGym's SciWorld server does: reset takes a real 'look around' step "
        "(its text, without the free look's trailing newline), an unknown action answers the engine's own "
        "text, and the episode ends as the engine's own API ends it - on completion, failure, or once the "
        "engine's move count (a 'wait' is 11 moves, a 'look' none) exceeds max_steps - instead of after "
        "max_steps actions. The AgentGym compatibility routes turn it on.",
    )
    java_heap: str | None = Field(
        default="512m", pattern=r"^\d+[kKmMgG]?$",
        description="JVM heap cap (-Xmx). The default heap grows past 2 GB per simulator; 512m holds it near "
        "480 MB at the same speed. None keeps the JVM default. Ignored when JAVA_TOOL_OPTIONS already sets -Xmx.",
    )
    recycle_after_episodes: int | None = Field(
        default=500, ge=1,
        description="Restart the JVM at the next reset after this many episodes (None: never).",
    )
    recycle_above_rss_mb: float | None = Field(
        default=900.0, gt=0,
        description="Restart the JVM at the next reset when its resident memory exceeds this many MiB (None: never).",
    )
    include_gold_path: bool = Field(
        default=False,
        description="Put ScienceWorld's gold action sequence in reset info['gold_actions'] (for experts and "
        "tests; costs extra time per reset and hands the agent the answer, so never enable it for training).",
    )
