"""Runs of the tiny model on the example env (agentgym_env_guess, an installed plugin the actors discover
themselves) under a private loopback Ray, and the local single-process run they are compared with."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("agentgym_env_guess")

PLUGINS = ["guess", "estimators", "transformers"]
KEYS = ("pg_loss", "kl", "kl_loss", "grad_norm", "sampled_tokens", "trained_trajectories")


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A private Ray on loopback: 4 CPUs, no dashboard, its sockets under the test's temp dir."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTGYM_DISABLE_PLUGIN_AUTOLOAD", "0")  # the actors discover the installed plugins
        mp.setenv("AGENTGYM_PLUGINS", ",".join(PLUGINS))
        mp.setenv("RAY_memory_monitor_refresh_ms", "0")  # a busy shared machine's memory is not these tests'
        # Ray renices its workers to 15: beside any CPU-bound job at 0 the actors then starve past the calls'
        # timeouts (an actor took minutes to import transformers beside a training run). Run them as the test runs.
        mp.setenv("RAY_worker_niceness", "0")
        mp.setenv("AGENTGYM_STRICT_COLLECTIVES", "cuda")  # learner ranks refuse what NCCL would (actors inherit it)
        short = tmp_path_factory.getbasetemp() / "r"  # unix socket paths must stay under ~107 characters
        ray.init(address="local", num_cpus=4, include_dashboard=False, _temp_dir=str(short), log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    path = tmp_path_factory.mktemp("tiny")
    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_dropout_path(tmp_path_factory):
    """The tiny model with attention dropout 0.1: the learner's update (model.train()) draws from each rank's
    torch RNG, so a resume that does not restore every rank's RNG state trains differently."""
    from agentgym_core.testing.tiny_model import tiny_chat_model

    path = tmp_path_factory.mktemp("tiny_dropout")
    model, tokenizer = tiny_chat_model(seed=0)
    model.config.attention_dropout = 0.1
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_config(tiny: Path, run_dir: Path, *overrides: str) -> Any:
    from agentgym_core.rl.config import load_config

    return load_config(None, [
        f"model.path={tiny}", "runtime.threads=1", "envs=[{name: guess, max_concurrency: 2}]",
        f"trainer.run_dir={run_dir}", "trainer.steps=2", "trainer.eval_tasks=0", "trainer.progress=false",
        "trainer.tensorboard=false", "trainer.seed=3", "rollout.tasks_per_step=2", "rollout.group_size=2",
        "rollout.max_new_tokens=6", "rollout.max_total_tokens=256", "algorithm.rounds_ctrl.rounds=2",
        "optim.lr=0.001", "algorithm.kl.coef=0.01", "algorithm.mini_batches=2", "trainer.ray.remote_timeout_s=120",
        "trainer.ray.placement_timeout_s=60",
        # Ray's rollout workers sample from copies, where auto turns the behaviour correction on; the runs
        # compared with the local one must compute the same loss.
        "algorithm.off_policy.correction=none", *overrides])


def run_training(config: Any) -> dict:
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.trainer import train

    return train(config, plugin_manager=PluginManager(autoload=True, allow=PLUGINS))


def trajectories(run_dir: Path) -> list[list[dict]]:
    """Each step's saved trajectories, in order."""
    steps = sorted((run_dir / "trajectories").glob("step_*.jsonl"))
    return [[json.loads(x) for x in f.read_text().splitlines()] for f in steps]


def eval_lines(run_dir: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [x for x in lines if x["kind"] == "eval"]


def train_lines(run_dir: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [x for x in lines if x["kind"] == "train"]


@pytest.fixture(scope="module")
def local_run(tiny_path, tmp_path_factory):
    """The same recipe on the local launcher, one process."""
    run_dir = tmp_path_factory.mktemp("local") / "run"
    run_training(make_config(tiny_path, run_dir))
    return run_dir


def assert_same_run(ray_dir: Path, local_dir: Path) -> None:
    """Token-identical trajectories (each sampled by the step before's weights) and losses within 1e-5."""
    ours, theirs = trajectories(ray_dir), trajectories(local_dir)
    assert len(ours) == len(theirs) == 2
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert [(t["task_id"], t["sample_index"], t["token_ids"]) for t in a] == \
            [(t["task_id"], t["sample_index"], t["token_ids"]) for t in b], f"step {step + 1}"
        assert all(t["policy_version"] == step for t in a)
    for a, b in zip(train_lines(ray_dir), train_lines(local_dir), strict=True):
        for k in KEYS:
            assert a[k] == pytest.approx(b[k], abs=1e-5), (k, a[k], b[k])
        assert a["staleness_max"] == 0


class Gate:
    """Holds the resets of an env server from the ``hold_from``-th on (counted from 0) until :meth:`open`.

    A kill test closes the phase it waits for with this gate, instead of polling for a window that a
    busy machine can miss: the run cannot get past a held reset, so the actor is killed in the phase
    the test names however slowly the machine runs."""

    def __init__(self, hold_from: int = 0, timeout_s: float = 180.0) -> None:
        self.hold_from, self.timeout_s = hold_from, timeout_s
        self.calls = 0
        self.held = threading.Event()  # a reset is waiting at the gate
        self.opened = threading.Event()
        self.opened_at: float | None = None  # time.monotonic() at open
        self._lock = threading.Lock()

    def pass_through(self) -> None:
        with self._lock:
            index, self.calls = self.calls, self.calls + 1
        if index >= self.hold_from and not self.opened.is_set():
            self.held.set()
            if not self.opened.wait(self.timeout_s):
                raise RuntimeError(f"the test's gate was never opened within {self.timeout_s:.0f} s")

    def open(self) -> None:
        if self.opened_at is None:
            self.opened_at = time.monotonic()
        self.opened.set()


@contextlib.contextmanager
def gated_guess_server(gate: Gate) -> Iterator[str]:
    """The guess env served on loopback by this process, its resets passing through ``gate``; yields the URL."""
    from agentgym_core.testing import serve_env
    from agentgym_env_guess.env import GuessEnv

    class GatedGuessEnv(GuessEnv):
        def reset(self, task_id: int, seed: int | None = None) -> Any:
            gate.pass_through()
            return super().reset(task_id, seed)

    with serve_env(GatedGuessEnv) as url:
        yield url


def gated_env(url: str) -> str:
    """The ``envs`` override that sends every episode of the run to the gated server at ``url``."""
    return f"envs=[{{name: guess, url: '{url}', max_concurrency: 2}}]"


def kill_actor_when(suffix: str, ready: Callable[[Any], bool], killed: list[int],
                    gate: Gate | None = None) -> threading.Thread:
    """From a thread, kill -9 the process of the run's actor named ``*suffix`` once ``ready(actor)`` is
    True (as an OOM killer or a lost node would), then open ``gate``. ``ready`` should test a state the
    gate holds the run in, not a passing moment."""
    def find() -> Any:
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["name"].endswith(suffix):
                return ray.get_actor(entry["name"], namespace=entry["namespace"])
        return None

    def run() -> None:
        deadline = time.time() + 180
        try:
            while time.time() < deadline:
                actor = find()
                try:
                    if actor is not None and ready(actor):
                        pid = ray.get(actor.pid.remote(), timeout=60)
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        return
                except ray.exceptions.RayError:
                    pass  # still starting
                time.sleep(0.05)
        finally:
            if gate is not None:
                gate.open()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
