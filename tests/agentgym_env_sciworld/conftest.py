"""Fixtures for the SciWorld tests. One warm JVM is shared through the plugin's process-wide pool."""

from __future__ import annotations

import pytest

from agentgym_env_sciworld import POOL, SciWorldEnv


@pytest.fixture
def env():
    """A SciWorld env on the pooled JVM; handed back to the pool afterwards."""
    instance = SciWorldEnv()
    yield instance
    instance.close()


@pytest.fixture(scope="session", autouse=True)
def _stop_pooled_jvms():
    yield
    POOL.close_idle()
