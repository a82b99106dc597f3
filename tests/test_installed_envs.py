"""Every installed environment passes check_env in-process and over HTTP (identical episodes), and says which
actions it refused (``StepResult.invalid_action``).

An environment that needs outside services (WebArena's sites) provides a classmethod
``conformance_context()``: a context manager that starts what it needs on loopback and yields
``(env_kwargs, task_ids)`` to check with.
"""

from __future__ import annotations

import pytest

from agentgym_core.plugins import PluginManager
from agentgym_core.testing import check_env_http

MANAGER = PluginManager(autoload=True)
ENVS = sorted(MANAGER.catalog("env"))


def test_no_installed_plugin_is_broken():
    assert MANAGER.broken_plugins() == []


@pytest.mark.parametrize("name", ENVS)
def test_installed_env_conforms(name):
    env_cls = MANAGER.env_class(name)
    context = getattr(env_cls, "conformance_context", None)
    if context is None:
        report = check_env_http(env_cls)
    else:
        with context() as (env_kwargs, task_ids):
            report = check_env_http(env_cls, env_kwargs, task_ids)
    # check_env saw its nonsense action refused; every family reports verdicts on its steps.
    assert all(episode.reports_invalid_actions for episode in report.episodes), f"{name} never sets invalid_action"
