"""Opening an environment the way a user names it: a registered name or an ``Env`` class, played in this
process, or a running ``agentgym serve`` reached by its URL.

``agentgym play``, ``agentgym eval``, ``agentgym collect`` and TRL's ``environment_factory``
(:mod:`agentgym_core.integrations.trl`) open their environment here, so the three ways, the check of the
constructor options and the refusal of options sent to a server are written once. It lives in the HTTP
room because one of the ways is this room's client; the other two need only the env interface and the
plugin manager, which the room already stands on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentgym_core.env import Env, TaskCatalog, check_env_options
from agentgym_core.http.client import EnvClient, HTTPEnv
from agentgym_core.plugins import PluginManager, get_plugin_manager

__all__ = ["EnvFactory", "env_factory"]


@dataclass(frozen=True)
class EnvFactory:
    """Fresh instances of one environment (call it), wherever it runs; made by :func:`env_factory`."""

    make: Callable[[], Env]
    tasks: Callable[[], TaskCatalog]
    """The environment's task catalog (over HTTP, read from the server on the first call)."""
    env_class: type[Env] | None
    """The configured class when the environment runs in this process; None over HTTP."""
    label: str
    """The environment's name (or the server's URL), for messages."""

    def __call__(self) -> Env:
        return self.make()


def env_factory(
    env: str | type[Env] | None = None,
    *,
    url: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
    plugin_manager: PluginManager | None = None,
    where: str = "env_kwargs",
    played_as: Callable[[type[Env]], type[Env]] | None = None,
) -> EnvFactory:
    """Instances of ``env`` (a registered name or an ``Env`` class) in this process, or of the server at ``url``.

    Args:
        env: the environment; with ``url``, the name of the server's environment (optional: a server serves one).
        url: a running ``agentgym serve``; its instances share one client, whose requests time out after ``timeout_s``.
        env_kwargs: constructor options, checked against the class now (unknown names get "did you mean"); a
            server was started with its own, so giving them with ``url`` is a ValueError.
        plugin_manager: where a name is looked up (default: the process-wide manager).
        where: the setting ``env_kwargs`` came from (``--env-kwargs``), named in the errors.
        played_as: a wrapper for the class that is played, e.g.
            :func:`~agentgym_core.rollout.tool_calls.tool_call_env` for a recipe's ``action_format: tool_call``
            (the caller picks it: opening an environment does not depend on how a model acts in it). In this
            process the class is wrapped; over HTTP the client is, so it reads the call and sends the server
            the plain action.
    """

    def played(cls: type[Env]) -> type[Env]:
        return played_as(cls) if played_as is not None else cls

    options = dict(env_kwargs or {})
    if url is not None:
        if options:
            raise ValueError(f"{where} configures an in-process environment; with a server URL, pass them to the "
                             "server instead: agentgym serve ENV --env-kwargs '{...}'")
        if env is not None and not isinstance(env, str):
            raise ValueError("with a server URL, name the server's environment (or give none), not an Env class")
        client, client_cls = EnvClient(url, timeout=timeout_s), played(HTTPEnv)
        return EnvFactory(make=lambda: client_cls(client=client, env=env), tasks=client.tasks, env_class=None,
                          label=url)
    if env is None:
        raise ValueError("no environment: give a registered name (agentgym envs lists them), an Env class or a URL")
    env_cls = (plugin_manager or get_plugin_manager()).env_class(env) if isinstance(env, str) else env
    check_env_options(env_cls, options, where=where)  # here, not once per episode
    configured = played(env_cls.configured(**options))
    return EnvFactory(make=lambda: configured(**options), tasks=configured.tasks, env_class=configured,
                      label=getattr(env_cls, "name", "") or env_cls.__name__)
