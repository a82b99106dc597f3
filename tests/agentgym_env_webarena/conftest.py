"""Fixtures for the WebArena plugin: one shared browser for the whole folder, skipped without chromium."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"


def chromium_missing() -> bool:
    return not Path(CHROMIUM).exists() and shutil.which("chromium") is None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not chromium_missing():
        return
    skip = pytest.mark.skip(reason="Debian chromium is not installed (apt-get install -y chromium)")
    for item in items:
        if "browser" in item.keywords and "agentgym_env_webarena" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture
def local_env():
    from agentgym_env_webarena import LocalWebArenaEnv

    made = []

    def make(**kwargs):
        env = LocalWebArenaEnv(**kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()
