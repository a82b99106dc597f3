"""trainer.launcher=ray: learner ranks and rollout workers as Ray actors on a private loopback Ray.

The runs train the tiny model on the example env (agentgym_env_guess, an installed plugin the actors
discover themselves) and are compared with the local single-process run of the same recipe.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("agentgym_env_guess")

from learner_ranks import train_lines  # noqa: E402

from agentgym_core.plugins import PluginManager  # noqa: E402
from agentgym_core.rl.config import load_config  # noqa: E402
from agentgym_core.rl.ray_launcher import RemoteCallError  # noqa: E402
from agentgym_core.rl.trainer import train  # noqa: E402

pytestmark = pytest.mark.slow
PLUGINS = ["guess", "estimators", "transformers"]
KEYS = ("pg_loss", "kl", "kl_loss", "grad_norm", "sampled_tokens", "trained_trajectories")


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A private Ray on loopback: 4 CPUs, no dashboard, its sockets under the test's temp dir."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTGYM_DISABLE_PLUGIN_AUTOLOAD", "0")  # the actors discover the installed plugins
        mp.setenv("AGENTGYM_PLUGINS", ",".join(PLUGINS))
        mp.setenv("RAY_memory_monitor_refresh_ms", "0")  # a busy shared machine's memory is not these tests'
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


def _config(tiny: Path, run_dir: Path, *overrides: str):
    return load_config(None, [
        f"model.path={tiny}", "model.threads=1", "envs=[{name: guess, max_concurrency: 2}]",
        f"trainer.run_dir={run_dir}", "trainer.steps=2", "trainer.eval_tasks=0", "trainer.progress=false",
        "trainer.tensorboard=false", "trainer.seed=3", "rollout.tasks_per_step=2", "rollout.group_size=2",
        "rollout.max_new_tokens=6", "rollout.max_total_tokens=256", "algorithm.rounds_ctrl.rounds=2",
        "optim.lr=0.001", "algorithm.kl.coef=0.01", "algorithm.mini_batches=2", "trainer.remote_timeout_s=120",
        "trainer.placement_timeout_s=60", *overrides])


def _train(config) -> dict:
    return train(config, plugin_manager=PluginManager(autoload=True, allow=PLUGINS))


def _trajectories(run_dir: Path) -> list[list[dict]]:
    steps = sorted((run_dir / "trajectories").glob("step_*.jsonl"))
    return [[json.loads(x) for x in f.read_text().splitlines()] for f in steps]


@pytest.fixture(scope="module")
def local_run(tiny_path, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("local") / "run"
    _train(_config(tiny_path, run_dir))
    return run_dir


def _assert_same_run(ray_dir: Path, local_dir: Path) -> None:
    ours, theirs = _trajectories(ray_dir), _trajectories(local_dir)
    assert len(ours) == len(theirs) == 2
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert [(t["task_id"], t["sample_index"], t["token_ids"]) for t in a] == \
            [(t["task_id"], t["sample_index"], t["token_ids"]) for t in b], f"step {step + 1}"
        assert all(t["policy_version"] == step for t in a)  # synchronous: sampled by the step before's weights
    for a, b in zip(train_lines(ray_dir), train_lines(local_dir), strict=True):
        for k in KEYS:
            assert a[k] == pytest.approx(b[k], abs=1e-5), (k, a[k], b[k])
        assert a["staleness_max"] == 0


def test_two_learner_ranks_and_two_rollout_workers_train_what_one_process_trains(
        ray_cluster, tiny_path, local_run, tmp_path):
    run_dir = tmp_path / "run"
    _train(_config(tiny_path, run_dir, "trainer.launcher=ray", "trainer.learners=2", "trainer.rollout_workers=2",
                   "rollout.max_staleness=0"))
    _assert_same_run(run_dir, local_run)
    assert (run_dir / "checkpoints" / "step_000002" / "DONE").exists()  # written by learner rank 0


def _kill_when_collecting(worker_suffix: str, killed: list[int]) -> threading.Thread:
    """Kill -9 the named rollout worker's process once it is sampling (from a thread, as an OOM killer would)."""
    def run() -> None:
        deadline = time.time() + 120
        while time.time() < deadline:
            names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"].endswith(worker_suffix)]
            if names:
                actor = ray.get_actor(names[0], namespace=next(
                    a["namespace"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"] == names[0]))
                try:
                    if ray.get(actor.is_collecting.remote(), timeout=10):
                        pid = ray.get(actor.pid.remote(), timeout=10)
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        return
                except ray.exceptions.RayError:
                    pass  # still starting
            time.sleep(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_killed_rollout_worker_is_restarted_and_its_batch_sampled_again(ray_cluster, tiny_path, local_run,
                                                                          tmp_path):
    killed: list[int] = []
    killer = _kill_when_collecting("-rollout-1", killed)
    run_dir = tmp_path / "run"
    _train(_config(tiny_path, run_dir, "trainer.launcher=ray", "trainer.rollout_workers=2",
                   "trainer.rollout_worker_restarts=1"))
    killer.join(timeout=1)
    assert killed, "the rollout worker was never seen sampling"
    _assert_same_run(run_dir, local_run)  # the restarted worker got the weights and re-sampled its slice


def test_a_killed_rollout_worker_without_restarts_fails_the_run_within_a_minute(ray_cluster, tiny_path, tmp_path):
    killed: list[int] = []
    killer = _kill_when_collecting("-rollout-1", killed)
    start = time.time()
    with pytest.raises(RemoteCallError, match=r"rollout worker 1: collect at step \d+: its actor died"):
        _train(_config(tiny_path, tmp_path / "run", "trainer.launcher=ray", "trainer.rollout_workers=2",
                       "trainer.rollout_worker_restarts=0"))
    killer.join(timeout=1)
    assert killed
    assert time.time() - start < 60 + 30  # 60 s once the worker is dead; start-up of the actors on top


def test_an_unplaceable_run_fails_in_time_naming_the_missing_resources(ray_cluster, tiny_path, tmp_path):
    start = time.time()
    with pytest.raises(RemoteCallError, match=r"Missing: GPU 2"):
        _train(_config(tiny_path, tmp_path / "run", "trainer.launcher=ray", "trainer.learners=2",
                       "trainer.learner_resources={num_cpus: 1, num_gpus: 1}", "trainer.placement_timeout_s=3"))
    assert time.time() - start < 20


def test_a_remote_call_that_hangs_or_raises_fails_with_the_call_the_step_and_the_remote_stack(ray_cluster):
    from agentgym_core.rl.ray_launcher import _Remote

    class Stuck:  # defined here: Ray ships it by value (the workers cannot import this test module)
        """An actor whose calls hang or fail, for the driver's side of remote calls."""

        def hang(self) -> None:
            time.sleep(600)

        def fail(self) -> None:
            raise ValueError("the learner ran out of patience")

    hanging, failing = (ray.remote(Stuck).options(num_cpus=0).remote() for _ in range(2))
    remote = _Remote(ray, timeout_s=2)
    remote.step = 7
    with pytest.raises(RemoteCallError, match=r"(?s)learner.score at step 7 raised:.*in fail.*out of patience"):
        remote.get(failing.fail.remote(), "learner.score")
    start = time.time()
    with pytest.raises(RemoteCallError, match=r"learner.update at step 7: no answer within 2 s"):
        remote.get(hanging.hang.remote(), "learner.update")
    assert time.time() - start < 10
    for actor in (hanging, failing):
        ray.kill(actor)


def test_missing_resources_names_what_the_whole_cluster_lacks():
    from agentgym_core.rl.ray_launcher import missing_resources

    bundles = [{"CPU": 1.0, "GPU": 1.0}] * 2 + [{"CPU": 2.0}]
    assert missing_resources(bundles, {"CPU": 8.0, "GPU": 1.0}) == {"GPU": 1.0}
    assert missing_resources(bundles, {"CPU": 2.0}) == {"CPU": 2.0, "GPU": 2.0}
    assert missing_resources(bundles, {"CPU": 4.0, "GPU": 2.0}) == {}
