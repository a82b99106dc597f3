"""An OpenEnv server's environment as an agentgym :class:`~agentgym_core.env.Env`, so the trainer,
``agentgym eval`` and ``agentgym serve`` use it like any other (recipe: ``envs: [{name: NAME, url:
URL, protocol: openenv}]``).

Each instance holds one WebSocket session on the server (``/ws``, as ``openenv-core``'s
``EnvClient``). OpenEnv has no task catalog: task ``i`` is the episode that ``reset`` with seed
``i`` starts, the train split is tasks ``0 .. train_tasks-1`` and the test split the next
``test_tasks``. Actions and observations are JSON objects in OpenEnv; the action text goes into the
one string field the server's ``/schema`` requires (or ``action_field``), and the observation text
is read from ``observation_field``, else a ``text`` field, else the only string field, else the
whole object as JSON.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import requests

from agentgym_core.env import Env, EnvError, ResetResult, StepResult, TaskCatalog

__all__ = ["OpenEnvRemote", "check_openenv_server"]

DEFAULT_INSTRUCTION = "Answer each observation with one action."


def _ws_url(url: str) -> str:
    base = url.rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if base.startswith(http):
            return ws + base[len(http):] + "/ws"
    return base + "/ws"


def check_openenv_server(url: str, *, timeout_s: float = 10.0) -> None:
    """Raise ValueError, naming ``url``, when no OpenEnv server answers its ``/health`` there."""
    http = url.rstrip("/").replace("ws://", "http://", 1).replace("wss://", "https://", 1)
    try:
        answer = requests.get(f"{http}/health", timeout=timeout_s)
        healthy = answer.status_code == 200 and answer.json().get("status") in ("healthy", "ok")
    except (requests.RequestException, ValueError):
        healthy = False
    if not healthy:
        raise ValueError(f"no OpenEnv server answers at {url} (GET {http}/health); start it, or check the url "
                         "and that the entry's protocol is right (protocol: openenv)")


class OpenEnvRemote(Env):
    """The environment of the OpenEnv server at ``url`` (see the module docstring).

    Args:
        url: the server's base URL (``http://host:port``; its WebSocket is ``/ws``).
        train_tasks, test_tasks: how many seeds make the train and test splits.
        action_field: the action's field that takes the text (default: read from ``/schema``).
        observation_field: the observation's field to show the agent (default: see the module docstring).
        instruction: the system prompt (default: the server's ``/metadata`` description and a line on acting).
        timeout_s: how long one answer from the server may take.
    """

    name: ClassVar[str] = "openenv"
    train_tasks: ClassVar[int] = 1000
    test_tasks: ClassVar[int] = 100

    def __init__(self, url: str, *, train_tasks: int = 1000, test_tasks: int = 100, action_field: str | None = None,
                 observation_field: str | None = None, instruction: str | None = None,
                 max_episode_steps: int | None = None, timeout_s: float = 60.0) -> None:
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        self.observation_field = observation_field
        self.max_episode_steps = max_episode_steps
        self._http = self.url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        self.action_field = action_field or self._action_field()
        self._instruction = instruction
        self._ws: Any = None
        self._session: Any = None

    @classmethod
    def configured(cls, **options: Any) -> type[Env]:
        train, test = int(options.get("train_tasks", 1000)), int(options.get("test_tasks", 100))
        if train < 1 or test < 0:
            raise ValueError(f"train_tasks must be >= 1 and test_tasks >= 0; got {train} and {test}")
        return type(cls.__name__, (cls,), {"train_tasks": train, "test_tasks": test, "__doc__": cls.__doc__})

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits={"train": list(range(cls.train_tasks)),
                                   "test": list(range(cls.train_tasks, cls.train_tasks + cls.test_tasks))})

    @property
    def instruction(self) -> str:
        if self._instruction is None:
            try:
                described = self._get("/metadata").get("description") or ""
            except EnvError:
                described = ""
            self._instruction = f"{described.strip()}\n\n{DEFAULT_INSTRUCTION}".strip()
        return self._instruction

    def _get(self, path: str) -> dict[str, Any]:
        try:
            answer = requests.get(f"{self._http}{path}", timeout=self.timeout_s)
            answer.raise_for_status()
            return answer.json()
        except (requests.RequestException, ValueError) as exc:
            raise EnvError(f"the OpenEnv server at {self.url} did not answer GET {path}: {exc}") from None

    def _action_field(self) -> str:
        schema = self._get("/schema").get("action") or {}
        properties = schema.get("properties") or {}
        text_fields = [name for name in schema.get("required") or []
                       if name != "metadata" and properties.get(name, {}).get("type") == "string"]
        if len(text_fields) != 1:
            raise EnvError(f"cannot tell which field of the OpenEnv action at {self.url} takes the text (its schema "
                           f"requires {schema.get('required')}); set env_kwargs.action_field")
        return text_fields[0]

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        try:
            if self._ws is None:  # websockets wants connect() entered as a context; left in close()
                self._session = connect(_ws_url(self.url), open_timeout=self.timeout_s, max_size=None, proxy=None)
                self._ws = self._session.__enter__()
            self._ws.send(json.dumps(message))
            answer = json.loads(self._ws.recv(timeout=self.timeout_s))
        except (OSError, TimeoutError, WebSocketException, ValueError) as exc:
            self.close()
            raise EnvError(f"the OpenEnv session at {self.url} failed: {type(exc).__name__}: {exc}") from None
        if answer.get("type") == "error":
            data = answer.get("data") or {}
            raise EnvError(f"the OpenEnv server at {self.url} answered {data.get('code')}: {data.get('message')}")
        return answer.get("data") or {}

    def _text(self, observation: Any) -> str:
        if not isinstance(observation, dict):
            return json.dumps(observation)
        if self.observation_field is not None:
            return str(observation.get(self.observation_field, ""))
        if isinstance(observation.get("text"), str):
            return observation["text"]
        strings = [value for value in observation.values() if isinstance(value, str)]
        return strings[0] if len(strings) == 1 else json.dumps(observation, sort_keys=True)

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        data = self._ask({"type": "reset", "data": {"seed": task_id}})
        observation = data.get("observation")
        return ResetResult(observation=self._text(observation), info={"openenv_observation": observation})

    def step(self, action: str) -> StepResult:
        data = self._ask({"type": "step", "data": {self.action_field: action}})
        observation = data.get("observation")
        return StepResult(observation=self._text(observation), reward=float(data.get("reward") or 0.0),
                          terminated=bool(data.get("done")), info={"openenv_observation": observation})

    def close(self) -> None:
        if self._ws is not None:
            ws, session, self._ws, self._session = self._ws, self._session, None, None
            try:
                ws.send(json.dumps({"type": "close"}))
                session.__exit__(None, None, None)
            except Exception:  # the session is gone either way
                pass
