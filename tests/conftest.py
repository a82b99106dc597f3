"""Suite-wide fixtures. Entry-point autoload is off: a test that wants installed plugins asks."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

os.environ["AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# The suite writes nothing to the user's cache (a GGUF model's converted copy, agentgym_core.models): a test
# that exercises the cache gives it a folder of its own.
os.environ["AGENTGYM_CACHE_DIR"] = ""

MAX_WORKERS = 4  # each worker may hold a few GB (a browser, two ranks, a Ray cluster): more would not fit a laptop


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (the default in pyproject.toml): one pytest-xdist worker per core, at most MAX_WORKERS;
    `-n 0` runs the suite in one process (for `-s` or `--pdb`)."""
    return min(_cores(), MAX_WORKERS)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (`--dist loadgroup`)
def pytest_collection_modifyitems(config, items) -> None:
    """A test file runs on one worker (its module fixtures are built once), unless its tests name an
    ``xdist_group``: the files of one group share a worker, one after another."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    # Workers share the cores: torch's default of one thread per core in every worker (and in the ranks and
    # commands each test starts, which inherit this) would oversubscribe them.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))


@pytest.fixture(scope="session")
def bench_script():
    """``bench_script(name)``: the script ``bench/<name>.py`` loaded as a module, with ``bench/`` on the path
    while it loads (the scripts import ``bench/common.py``)."""
    bench = Path(__file__).parents[1] / "bench"

    def load(name: str):
        with pytest.MonkeyPatch.context() as mp:
            mp.syspath_prepend(str(bench))
            spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random chat model saved as a Hugging Face directory (what `--model DIR` loads)."""
    from agentgym_core.testing.tiny_model import tiny_chat_model

    path = tmp_path_factory.mktemp("tiny_model")
    model, tokenizer = tiny_chat_model()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def one_rl_step(tmp_path):
    """Recipe overrides for one small GRPO step into ``tmp_path / "run"``, quiet; keyword arguments
    change a dotted key (``group_size=4`` sets ``rollout.group_size``)."""

    def overrides(**changes: object) -> list[str]:
        keys = {
            "trainer.steps": 1, "trainer.save_every": 1, "trainer.eval_tasks": 1, "trainer.progress": "false",
            "trainer.tensorboard": "false", "rollout.tasks_per_step": 1, "rollout.group_size": 2,
            "rollout.max_new_tokens": 6, "rollout.max_total_tokens": 1024, "algorithm.rounds_ctrl.rounds": 3,
        }
        for name, value in changes.items():
            keys[next(k for k in keys if k.rsplit(".", 1)[1] == name)] = value
        return [f"trainer.run_dir={tmp_path / 'run'}", *(f"{k}={v}" for k, v in keys.items())]

    return overrides
