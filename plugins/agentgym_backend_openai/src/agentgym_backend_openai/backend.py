"""A :class:`agentgym_core.rollout.text_engine.ChatBackend` over any OpenAI-compatible chat API.

``chat`` posts one ``/chat/completions`` request (``n=1``) with plain ``requests``: no SDK, so any
server that speaks the protocol works (OpenAI, vLLM, llama.cpp's server, ``agentgym serve-model``).
Calls come from many rollout threads at once; each thread keeps its own HTTP session, so
connections are reused without sharing a session across threads.

Retries: a refused connection, a timeout, a 429 or a 5xx is retried ``max_retries`` times with
doubling back-off (a ``Retry-After`` header wins); other 4xx answers are configuration errors and
fail at once with the server's own message. A context-length refusal raises
:class:`ContextLengthError`, which the text engine records as a ``token_budget`` truncation.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import requests

from agentgym_backend_openai.config import CAPABILITIES, OpenAIBackendConfig
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.rollout.text_engine import ChatBackendError, ChatReply, ContextLengthError

__all__ = ["CAPABILITIES", "OpenAIChatBackend", "make_backend", "normalize_base_url"]

_RETRY_STATUS = {408, 409, 429}


def normalize_base_url(url: str) -> str:
    """``http://host:port`` -> ``http://host:port/v1``; any given path is kept (without a trailing '/')."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base URL must look like http://HOST:PORT/v1, got {url!r}")
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path or '/v1'}"


def _error_message(response: requests.Response) -> tuple[str, str | None]:
    """(message, code) from an OpenAI-shaped error body, or the raw text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason, None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error), error.get("code")
    if isinstance(error, str):
        return error, None
    return str(body)[:500], None


class OpenAIChatBackend:
    """Text-in, text-out chat model behind an OpenAI-compatible API (see the module docstring)."""

    name = "openai"

    def __init__(self, config: OpenAIBackendConfig) -> None:
        self.config = config
        self.base_url = normalize_base_url(config.base_url)
        self.api_key = config.api_key or os.environ.get("OPENAI_API_KEY") or None
        self._local = threading.local()

    @property
    def sampling_setup(self) -> dict[str, str]:
        """What sampling runs on, as far as a client can say, written once into a run's metrics as
        ``rollout/<name>``: a remote server, and which one. Its device, dtype and kernels are the server's
        (``agentgym serve-model`` and vLLM print theirs at start-up)."""
        return {"device": "remote", "decode_engine": "openai-compatible server",
                "server": f"{self.base_url} (model {self.config.model})"}

    # -- HTTP -----------------------------------------------------------------------------------
    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            if self.api_key:
                session.headers["Authorization"] = f"Bearer {self.api_key}"
            self._local.session = session
        return session

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        cfg, url = self.config, f"{self.base_url}{path}"
        last = ""
        for attempt in range(cfg.max_retries + 1):
            delay = cfg.retry_backoff_s * 2**attempt
            try:
                response = self._session().request(method, url, json=body, timeout=cfg.timeout_s)
            except requests.Timeout:
                last = f"no answer within {cfg.timeout_s:g}s"
            except requests.ConnectionError as exc:
                last = (f"cannot connect ({type(exc).__name__}); is the server running at {self.base_url}? "
                        "Check --base-url")
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise ChatBackendError(f"{method} {url} answered {response.status_code} with a body that "
                                               f"is not JSON: {response.text[:200]!r}") from None
                message, code = _error_message(response)
                status = response.status_code
                if status not in _RETRY_STATUS and status < 500:
                    raise self._client_error(method, url, status, message, code)
                last = f"HTTP {status}: {message}"
                retry_after = response.headers.get("retry-after", "")
                if retry_after.replace(".", "", 1).isdigit():
                    delay = float(retry_after)
            if attempt < cfg.max_retries:
                time.sleep(delay)
        tries = cfg.max_retries + 1
        raise ChatBackendError(f"{method} {url} failed after {tries} attempt{'s' * (tries > 1)}: {last}")

    def _client_error(self, method: str, url: str, status: int, message: str, code: str | None) -> ChatBackendError:
        text = f"{method} {url} answered {status}: {message}"
        if code == "context_length_exceeded" or "context length" in message.lower():
            return ContextLengthError(text)
        if status in (401, 403):
            text += " (set OPENAI_API_KEY or pass --api-key)"
        elif status == 404 and code == "model_not_found":
            text += " (check --model against GET /models)"
        return ChatBackendError(text)

    # -- the ChatBackend contract -----------------------------------------------------------------
    def preflight(self) -> None:
        """Fail fast when the server answers that the key is rejected or the model is unknown.

        An unreachable server is not an error here: every episode then records the failure.
        """
        if not self.config.check_model:
            return
        url = f"{self.base_url}/models"
        try:
            response = self._session().get(url, timeout=min(self.config.timeout_s, 30.0))
        except requests.RequestException:
            return
        if response.status_code in (401, 403):
            message, code = _error_message(response)
            raise self._client_error("GET", url, response.status_code, message, code)
        if response.status_code != 200:
            return  # servers without a model list are fine; the first call will say more
        try:
            served = [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            return
        if served and self.config.model not in served:
            raise ChatBackendError(
                f"the server at {self.base_url} does not serve model {self.config.model!r}; it serves {served}. "
                "Pass one of them with --model."
            )

    def chat(self, messages: Sequence[Mapping[str, str]], params: SamplingParams) -> ChatReply:
        """One reply to ``messages`` (``params.max_new_tokens`` is sent as the reply cap)."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            self.config.max_tokens_field: params.max_new_tokens,
            "n": 1,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        if params.top_k:
            body["top_k"] = params.top_k  # not OpenAI's; vLLM and serve-model take it
        data = self._request("POST", "/chat/completions", body)
        try:
            choice = data["choices"][0]
            content = choice.get("message", {}).get("content") or ""
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ChatBackendError(f"the answer of {self.base_url}/chat/completions is not a chat completion: "
                                   f"{str(data)[:300]}") from None
        usage = data.get("usage") or {}
        return ChatReply(
            text=content, finish_reason="length" if finish == "length" else "eos",
            prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
        )


def make_backend(config: OpenAIBackendConfig | Mapping[str, Any] | None = None) -> OpenAIChatBackend:
    """The registered factory: a config (or dict of its fields) -> a backend (no network call yet)."""
    if not isinstance(config, OpenAIBackendConfig):
        config = OpenAIBackendConfig.model_validate(dict(config or {}))
    return OpenAIChatBackend(config)

