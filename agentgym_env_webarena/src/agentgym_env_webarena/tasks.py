"""Tasks: webarena-verified's 812 (or any file in its JSON format), their splits and categories.

Splits. AgentGym-RL reports WebArena on a 50-task test set (AgentGym's `webarena_test.json`,
whose items name WebArena config indices). That list ships with AgentGym's eval data, not with
any package here, so the default test split is a fixed, site-stratified 50-task subset: every
site gets a share proportional to its task count, picked by a seeded shuffle. To evaluate on the
anchor's exact list, set ``AGENTGYM_WEBARENA_TEST_IDS`` to comma-separated task ids (or to a file
holding them); the train split is always every other task.

Categories are the task's sites joined with '-' (``shopping``, ``gitlab-reddit``), as
webarena-verified groups its own results.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym_core import InvalidTaskError, TaskCatalog

if TYPE_CHECKING:
    from webarena_verified.types.task import WebArenaVerifiedTask

__all__ = [
    "LOCAL_TASKS_FILE",
    "TEST_IDS_ENV_VAR",
    "TaskSet",
    "VERIFIED_TASKS_FILE",
    "render_start_urls",
]

TEST_IDS_ENV_VAR = "AGENTGYM_WEBARENA_TEST_IDS"

def _package_folder(package: str) -> Path:
    """An installed package's folder, found without importing it (webarena_verified takes seconds)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


VERIFIED_TASKS_FILE = _package_folder("webarena_verified") / "assets/dataset/webarena-verified.json"
LOCAL_TASKS_FILE = Path(str(resources.files("agentgym_env_webarena") / "testing_sites/tasks.json"))
_TEST_SIZE = 50
_SPLIT_SEED = 20250910


def render_start_urls(task: WebArenaVerifiedTask, sites: dict[str, str]) -> list[str]:
    """Replace `__SHOPPING__`-style placeholders with the configured site URLs."""
    urls = []
    for template in task.start_urls:
        url = template
        for site in task.sites:
            placeholder = site.url_name_template
            if placeholder in url:
                base = sites.get(site.value)
                if not base:
                    var = site.value.upper()
                    raise InvalidTaskError(
                        f"task {task.task_id} starts on {site.value!r} but no URL is configured for it; "
                        f"set the {var} environment variable (e.g. {var}=http://host:port) or pass "
                        f"sites={{'{site.value}': 'http://...'}}"
                    )
                url = url.replace(placeholder, base)
        urls.append(url)
    return urls


class TaskSet:
    """The tasks of one JSON file; a task is validated by webarena-verified's own model when first used.

    Splits and categories need only each task's id and sites, so listing them (``agentgym envs``)
    does not import webarena-verified's evaluators.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tasks: dict[int, dict[str, Any]] = {}
        for item in json.loads(path.read_text()):
            task_id = item.get("task_id") if isinstance(item, dict) else None
            if not isinstance(task_id, int) or not isinstance(item.get("sites"), list):
                raise ValueError(f"{path}: every task needs an integer 'task_id' and a list of 'sites', got {item!r:.80}")
            if task_id in self.tasks:
                raise ValueError(f"{path}: task_id {task_id} appears twice")
            self.tasks[task_id] = item
        self._validated: dict[int, WebArenaVerifiedTask] = {}

    @classmethod
    @functools.cache
    def load(cls, path: Path) -> TaskSet:
        """Parse once per process (the 812-task file takes ~0.3 s)."""
        return cls(path)

    def get(self, task_id: int) -> WebArenaVerifiedTask:
        if task_id not in self.tasks:
            raise InvalidTaskError(
                f"no task {task_id} in {self.path.name}; ids run from {min(self.tasks)} to {max(self.tasks)}"
            )
        if task_id not in self._validated:
            from webarena_verified.types.task import WebArenaVerifiedTask

            self._validated[task_id] = WebArenaVerifiedTask.model_validate(self.tasks[task_id])
        return self._validated[task_id]

    def categories(self) -> dict[str, list[int]]:
        """Task ids by sites joined with '-', as webarena-verified's ``sites_str`` names them."""
        cats: dict[str, list[int]] = {}
        for task_id, task in sorted(self.tasks.items()):
            cats.setdefault("-".join(sorted(task["sites"])), []).append(task_id)
        return cats

    def catalog(self, test_ids: list[int] | None = None, test_size: int = _TEST_SIZE) -> TaskCatalog:
        """Train/test splits (test from `test_ids`, the env var, or a stratified default) and categories."""
        if test_ids is None:
            test_ids = _test_ids_from_environ()
        if test_ids is None:
            test_ids = self._stratified(test_size)
        unknown = sorted(set(test_ids) - set(self.tasks))
        if unknown:
            raise InvalidTaskError(f"test task ids {unknown[:10]} are not in {self.path.name}")
        test = sorted(set(test_ids))
        train = sorted(set(self.tasks) - set(test))
        return TaskCatalog(splits={"train": train, "test": test}, categories=self.categories())

    def _stratified(self, size: int) -> list[int]:
        cats = self.categories()
        total = len(self.tasks)
        if size >= total:
            return sorted(self.tasks)
        rng = random.Random(_SPLIT_SEED)
        # Largest-remainder apportionment, so shares add up to exactly `size`.
        quotas = {name: size * len(ids) / total for name, ids in cats.items()}
        counts = {name: int(q) for name, q in quotas.items()}
        for name in sorted(quotas, key=lambda n: quotas[n] - counts[n], reverse=True)[: size - sum(counts.values())]:
            counts[name] += 1
        picked: list[int] = []
        for name in sorted(cats):
            ids = list(cats[name])
            rng.shuffle(ids)
            picked.extend(ids[: counts[name]])
        return sorted(picked)


def _test_ids_from_environ() -> list[int] | None:
    value = os.environ.get(TEST_IDS_ENV_VAR, "").strip()
    if not value:
        return None
    if not value.replace(",", "").replace(" ", "").isdigit():
        value = Path(value).read_text()
    try:
        return [int(part) for part in value.replace("\n", ",").split(",") if part.strip()]
    except ValueError:
        raise InvalidTaskError(
            f"{TEST_IDS_ENV_VAR} must be comma-separated task ids or a file of them, got {value[:80]!r}"
        ) from None
