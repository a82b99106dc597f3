"""`LocalWebArenaEnv`: the WebArena environment on the bundled local sites and their tasks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from agentgym_core import TaskCatalog
from agentgym_env_webarena.env import WebArenaEnv
from agentgym_env_webarena.tasks import LOCAL_TASKS_FILE, TaskSet
from agentgym_env_webarena.testing_sites import local_sites

__all__ = ["LocalWebArenaEnv"]

#: Test split of the local tasks: one shop retrieval, one shop navigation, one forum navigation.
LOCAL_TEST_IDS = [0, 1, 2]


class LocalWebArenaEnv(WebArenaEnv):
    """WebArenaEnv on the bundled shop and forum (started in-process on 127.0.0.1 on first use).

    Same browser, observation, actions and graders as `webarena`; only the sites and tasks differ.
    The SHOPPING/REDDIT env vars are ignored here (they point at the real sites); pass
    ``sites=`` to use other copies of the local sites.
    """

    name: ClassVar[str] = "webarena_local"
    tasks_file: ClassVar[Path] = LOCAL_TASKS_FILE

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskSet.load(cls.tasks_file).catalog(test_ids=LOCAL_TEST_IDS)

    @classmethod
    @contextlib.contextmanager
    def conformance_context(cls) -> Iterator[tuple[dict[str, Any], list[int]]]:
        """The bundled sites start on first use; check the first two local test tasks."""
        yield {}, LOCAL_TEST_IDS[:2]

    def site_urls(self) -> dict[str, str]:
        return {**local_sites().urls, **{k: v.rstrip("/") for k, v in self.config.sites.items()}}
