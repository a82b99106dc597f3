"""Typed configuration of the OpenAI-compatible chat backend."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentgym_core.rollout.backend import BackendCapabilities

__all__ = ["CAPABILITIES", "OpenAIBackendConfig"]

CAPABILITIES = BackendCapabilities(token_level=False, weight_sync="none")  # declared where the plugin registers it


class OpenAIBackendConfig(BaseModel):
    """Where the API is and how to call it."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="The model id the server knows (e.g. 'gpt-4o-mini', or serve-model's name).")
    base_url: str = Field(
        default="https://api.openai.com/v1",
        description="API root as for the OpenAI SDK, ending in /v1; a bare http://host:port gets /v1 appended.",
    )
    api_key: str | None = Field(
        default=None, description="Bearer key; None reads $OPENAI_API_KEY (a server without keys needs none)."
    )
    timeout_s: float = Field(default=120.0, gt=0, description="Limit on one HTTP request (connect + read).")
    max_retries: int = Field(
        default=3, ge=0, description="Retries of a call that failed on the connection, a 429 or a 5xx."
    )
    retry_backoff_s: float = Field(
        default=1.0, ge=0, description="First retry delay; doubles per retry (a Retry-After header wins)."
    )
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        default="max_tokens",
        description="Request field carrying the reply cap; newer OpenAI reasoning models need max_completion_tokens.",
    )
    check_model: bool = Field(
        default=True, description="Before a run, ask GET /models whether the server knows `model` (fail fast if not)."
    )
