"""A client that implements the :class:`~agentgym_core.env.Env` interface over HTTP.

``HTTPEnv(url)`` behaves like the environment object it stands for: code written against
``Env`` cannot tell a local environment from a remote one. Connections are pooled per
``EnvClient``; connection errors and timeouts are retried with backoff for idempotent calls.
``create`` carries a fresh ``request_id``, so the server answers a retried create with the instance
the first attempt made (no orphans when an answer is lost); ``step`` is never retried after the
request may have reached the server. Protocol errors are raised as the same exceptions the
environment would raise in-process.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from agentgym_core.env import (
    Env,
    EnvError,
    EpisodeEndedError,
    InvalidTaskError,
    ResetResult,
    StepResult,
    TaskCatalog,
)
from agentgym_core.http import protocol as p
from agentgym_core.http.auth import TOKEN_ENV, resolve_token

__all__ = ["EnvClient", "HTTPEnv", "RemoteError", "ServerUnreachableError"]


class RemoteError(EnvError):
    """The server answered an error; ``status`` and ``code`` are the protocol's."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} (HTTP {status} {code})")
        self.status, self.code, self.message = status, code, message


class ServerUnreachableError(EnvError):
    """No answer from the environment server (refused, timed out, unknown host); the message says what to check."""

    def __init__(self, base_url: str, exc: Exception) -> None:
        text = str(exc).lower()
        if isinstance(exc, requests.Timeout):
            reason = "no answer in time"
        elif "refused" in text:
            reason = "connection refused"
        elif "name or service not known" in text or "nodename nor servname" in text or "resolve" in text:
            reason = "unknown host"
        else:
            reason = type(exc).__name__
        super().__init__(f"cannot reach the environment server at {base_url} ({reason}); is `agentgym serve ENV` "
                         "running there? Start it, or fix the URL (--env-url, or envs[].url in a recipe)")
        self.base_url, self.reason = base_url, reason


class _RemoteEpisodeEnded(RemoteError, EpisodeEndedError):
    pass


class _RemoteInvalidTask(RemoteError, InvalidTaskError):
    pass


_BY_CODE: dict[str, type[RemoteError]] = {
    "episode_ended": _RemoteEpisodeEnded,
    "invalid_task": _RemoteInvalidTask,
}


class EnvClient:
    """A pooled connection to one environment server (thread-safe; share it between HTTPEnvs).

    Args:
        base_url: e.g. ``http://127.0.0.1:8000``.
        timeout: seconds for connect + read of one request.
        retries: attempts after a connection error (only for calls that are safe to repeat).
        pool_size: connections kept open (set it to the number of concurrent users).
        trust_env: honour HTTP(S)_PROXY / NO_PROXY and ~/.netrc. Off by default: environment
            servers are local or cluster-internal, and requests re-reads those settings on every
            call, which doubled the per-step latency on loopback (bench/env_server.py).
        token: the server's shared token (``agentgym serve --token``), sent as
            ``Authorization: Bearer``; default: $AGENTGYM_TOKEN, none when unset.
    """

    def __init__(self, base_url: str, *, timeout: float = 60.0, retries: int = 3, pool_size: int = 64,
                 trust_env: bool = False, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout, self.retries = timeout, retries
        self._session = requests.Session()
        self._session.trust_env = trust_env
        token = resolve_token(token)
        if token is not None:
            self._session.headers["Authorization"] = f"Bearer {token}"
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=pool_size)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._tasks: TaskCatalog | None = None
        self._info: p.EnvInfo | None = None
        self._lock = threading.Lock()

    def request(self, method: str, path: str, *, json: Any = None, idempotent: bool = True) -> Any:
        url = f"{self.base_url}{p.PREFIX}{path}"
        attempts = 1 + (self.retries if idempotent else 0)
        for attempt in range(attempts):
            try:
                response = self._session.request(method, url, json=json, timeout=self.timeout)
                break
            except (requests.ConnectionError, requests.Timeout) as exc:
                if attempt + 1 == attempts or isinstance(exc, requests.ReadTimeout) and not idempotent:
                    raise ServerUnreachableError(self.base_url, exc) from exc
                time.sleep(min(2.0, 0.1 * 2**attempt))
        if response.status_code >= 400:
            raise self._error(response)
        return response.json()

    @staticmethod
    def _error(response: requests.Response) -> RemoteError:
        try:
            error = response.json()["error"]
            code, message = error["code"], error["message"]
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", response.text[:500] or response.reason
        if code == "unauthorized":
            message += f" (set ${TOKEN_ENV} to the token the server was started with)"
        return _BY_CODE.get(code, RemoteError)(response.status_code, code, message)

    def health(self) -> p.Health:
        return p.Health.model_validate(self.request("GET", "/health"))

    def info(self) -> p.EnvInfo:
        with self._lock:
            if self._info is None:
                self._info = p.EnvInfo.model_validate(self.request("GET", "/info"))
            return self._info

    def tasks(self) -> TaskCatalog:
        with self._lock:
            if self._tasks is None:
                self._tasks = TaskCatalog.model_validate(self.request("GET", "/tasks"))
            return self._tasks

    def step_batch(self, steps: list[tuple[int, str]]) -> list[p.BatchItemOutcome]:
        body = p.BatchStep(steps=[p.BatchStepItem(instance_id=i, action=a) for i, a in steps])
        answer = self.request("POST", "/step_batch", json=body.model_dump(), idempotent=False)
        return p.BatchStepOutcome.model_validate(answer).results

    def close(self) -> None:
        self._session.close()


class HTTPEnv(Env):
    """One remote environment instance, created lazily on the first ``reset``.

    Args:
        base_url: the server, or pass ``client=`` to share a connection pool.
        env: the environment's name; checked against the server's when given.
        token: the server's shared token (default: $AGENTGYM_TOKEN); see :class:`EnvClient`.
    """

    def __init__(self, base_url: str | None = None, *, env: str | None = None, client: EnvClient | None = None,
                 timeout: float = 60.0, token: str | None = None) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("HTTPEnv needs base_url or client")
            client = EnvClient(base_url, timeout=timeout, token=token)
            self._owns_client = True
        else:
            self._owns_client = False
        self.client = client
        self.env_name = env
        self.instance_id: int | None = None
        self._closed = False

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.env_name or self.client.info().env

    @property
    def instruction(self) -> str:
        return self.client.info().instruction

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.client.info().tools

    @property
    def max_episode_steps(self) -> int | None:  # type: ignore[override]  # the served instances' limit
        return self.client.info().max_episode_steps

    def parse_action(self, text: str) -> str:
        answer = self.client.request("POST", "/parse_action", json={"text": text})
        return str(answer["action"])

    def tasks(self) -> TaskCatalog:  # type: ignore[override]  # a remote catalog needs the instance's client
        return self.client.tasks()

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        if self._closed:
            raise EnvError("this HTTPEnv was closed; create a new one")
        if self.instance_id is None:
            body = {"env": self.env_name, "task_id": task_id, "seed": seed, "request_id": uuid.uuid4().hex}
            answer = self.client.request("POST", "/instances", json=body)
            self.instance_id = int(answer["instance_id"])
        else:
            answer = self.client.request("POST", f"/instances/{self.instance_id}/reset",
                                         json={"task_id": task_id, "seed": seed})
        return ResetResult(observation=answer["observation"], info=answer.get("info") or {})

    def step(self, action: str) -> StepResult:
        if self.instance_id is None:
            raise EnvError("step() before reset(): reset the environment onto a task first")
        answer = self.client.request("POST", f"/instances/{self.instance_id}/step", json={"action": action},
                                     idempotent=False)
        answer.pop("instance_id", None)
        return StepResult.model_validate(answer)

    def observation(self) -> str:
        if self.instance_id is None:
            raise EnvError("no observation before reset()")
        return str(self.client.request("GET", f"/instances/{self.instance_id}/observation")["observation"])

    def available_actions(self) -> list[str] | None:
        if self.instance_id is None:
            return None
        return self.client.request("GET", f"/instances/{self.instance_id}/available_actions")["actions"]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.instance_id is not None:
                try:
                    self.client.request("DELETE", f"/instances/{self.instance_id}")
                except RemoteError as exc:
                    if exc.status != 404:  # already gone (expired or closed elsewhere) is fine
                        raise
                except EnvError:
                    pass  # the server is gone; nothing left to free
        finally:
            if self._owns_client:
                self.client.close()
