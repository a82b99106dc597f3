"""trainer.launcher=ray: learner ranks and rollout workers as Ray actors give the local run's numbers;
asynchronous rollouts keep their bound; placement and remote calls never hang silently."""

from __future__ import annotations

import time

import pytest
from conftest import (
    PLUGINS,
    assert_same_run,
    eval_lines,
    make_config,
    ray,
    run_training,
    train_lines,
    trajectories,
)

from agentgym_core.rl.ray_launcher import RemoteCallError

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one private Ray cluster at a time


def test_two_learner_ranks_and_two_rollout_workers_train_what_one_process_trains(
        ray_cluster, tiny_path, tmp_path):
    run_dir = tmp_path / "run"
    # The guess env pays the tiny model nothing, so step 1's only gradient is the KL term's float noise
    # (policy == reference), which two ranks sum in another order, and AdamW turns any noise into
    # lr-sized moves. At this rate those moves cannot change a sampled token; the update of two ranks
    # with a real gradient is compared with one process's in test_learner_ranks.py.
    # Evaluations too: the two workers each play a share of 3 tasks; the driver logs what one process logs.
    run_training(make_config(tiny_path, run_dir, "trainer.launcher=ray", "trainer.learners=2",
                             "trainer.ray.rollout_workers=2", "rollout.max_staleness=0", "optim.lr=1e-7",
                             "trainer.eval_tasks=3"))
    local = tmp_path / "local"
    run_training(make_config(tiny_path, local, "optim.lr=1e-7", "trainer.eval_tasks=3"))
    assert_same_run(run_dir, local)
    ours, theirs = (eval_lines(d) for d in (run_dir, local))
    assert [x["step"] for x in ours] == [0, 2] and [len(x["per_task"]) for x in ours] == [3, 3]
    assert [(x["step"], list(x["per_task"].items()), x["turns"]) for x in ours] == \
        [(x["step"], list(x["per_task"].items()), x["turns"]) for x in theirs]
    assert (run_dir / "checkpoints" / "step_000002" / "DONE").exists()  # written by learner rank 0
    # what the rollout workers sample on, asked of each actor: both on the CPU with sdpa, so said once
    setup = {k: v for k, v in train_lines(run_dir)[0].items() if k.startswith("rollout/")}
    assert setup == {k: v for k, v in train_lines(local)[0].items() if k.startswith("rollout/")}
    assert setup["rollout/device"] == "cpu" and setup["rollout/attention_kernel"] == "sdpa"


def test_the_curriculum_on_ray_draws_what_one_process_draws(ray_cluster, tiny_path, tmp_path):
    """The workers get the driver's pass counts with each collect: two of them sample and log what the
    local run does, and step 2 is drawn from the counts of step 1."""
    curriculum = "rollout.curriculum.kind=pass_rate"
    run_training(make_config(tiny_path, tmp_path / "local", curriculum))
    run_training(make_config(tiny_path, tmp_path / "ray", curriculum, "trainer.launcher=ray",
                             "trainer.ray.rollout_workers=2"))
    assert_same_run(tmp_path / "ray", tmp_path / "local")
    keys = ("curriculum/guess/expected_mixed", "curriculum/guess/categories_weighted")
    ours, theirs = train_lines(tmp_path / "ray"), train_lines(tmp_path / "local")
    assert [[x[k] for k in keys] for x in ours] == [[x[k] for k in keys] for x in theirs]  # not summed over workers
    assert ours[0][keys[0]] == 0.5 and ours[1][keys[0]] != 0.5  # unseen categories at step 1; counted by step 2


def test_an_adaptive_horizon_on_ray_moves_when_the_local_run_moves(ray_cluster, tiny_path, tmp_path):
    """The driver advances the round schedule before it publishes the new weights: the rollout side starts
    the next step as soon as they arrive and must sample it at the horizon the step before earned. An
    observer that takes its time over each update widens any window between the two to a second."""
    from agentgym_core import hookimpl
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.trainer import train

    class SlowObserver:
        @hookimpl
        def agentgym_observe_update(self, step, metrics):
            time.sleep(1.0)

    adaptive = ("algorithm.rounds_ctrl={type: adaptive, rounds: [1, 3], threshold: 0.0, window: 1, "
                "min_steps_per_stage: 1}")
    run_training(make_config(tiny_path, tmp_path / "local", adaptive))
    pm = PluginManager(autoload=True, allow=PLUGINS)
    pm.register(SlowObserver(), "slow_observer")
    train(make_config(tiny_path, tmp_path / "ray", adaptive, "trainer.launcher=ray", "trainer.ray.rollout_workers=2"),
          plugin_manager=pm)
    assert [x["horizon"] for x in train_lines(tmp_path / "local")] == [1.0, 3.0]
    assert [x["horizon"] for x in train_lines(tmp_path / "ray")] == [1.0, 3.0]
    assert_same_run(tmp_path / "ray", tmp_path / "local")


def test_max_staleness_1_on_ray_trains_trajectories_at_most_one_version_old(ray_cluster, tiny_path, tmp_path):
    run_dir = tmp_path / "run"
    run_training(make_config(tiny_path, run_dir, "trainer.launcher=ray", "trainer.ray.rollout_workers=2",
                             "rollout.max_staleness=1", "trainer.steps=3"))
    steps = trajectories(run_dir)
    assert len(steps) == 3
    for step, trajs in enumerate(steps):
        assert trajs and all(0 <= step - t["policy_version"] <= 1 for t in trajs)
    assert [x["staleness_max"] <= 1 for x in train_lines(run_dir)] == [True] * 3


def test_an_unplaceable_run_fails_in_time_naming_the_missing_resources(ray_cluster, tiny_path, tmp_path):
    start = time.time()
    with pytest.raises(RemoteCallError, match=r"Missing: GPU 2"):
        run_training(make_config(tiny_path, tmp_path / "run", "trainer.launcher=ray", "trainer.learners=2",
                                 "trainer.ray.learner_resources={num_cpus: 1, num_gpus: 1}",
                                 "trainer.ray.placement_timeout_s=3"))
    assert time.time() - start < 60  # the 3 s placement timeout, not the 120 s call timeout (a busy machine adds start-up)


def test_a_remote_call_that_hangs_or_raises_fails_with_the_call_the_step_and_the_remote_stack(ray_cluster):
    from agentgym_core.rl.ray_launcher import _Remote

    class Stuck:  # defined here: Ray ships it by value (the workers cannot import this test module)
        """An actor whose calls hang or fail, for the driver's side of remote calls."""

        def hang(self) -> None:
            time.sleep(600)

        def fail(self) -> None:
            raise ValueError("the learner ran out of patience")

    hanging, failing = (ray.remote(Stuck).options(num_cpus=0).remote() for _ in range(2))
    # Both actors' processes up first: on a busy machine starting one takes longer than the 2 s timeout.
    ray.get([hanging.__ray_ready__.remote(), failing.__ray_ready__.remote()], timeout=120)
    remote = _Remote(ray, timeout_s=2)
    remote.step = 7
    with pytest.raises(RemoteCallError, match=r"(?s)learner.score at step 7 raised:.*in fail.*out of patience"):
        remote.get(failing.fail.remote(), "learner.score", timeout_s=60)  # the error, however slow the machine
    start = time.time()
    with pytest.raises(RemoteCallError, match=r"learner.update at step 7: no answer within 2 s"):
        remote.get(hanging.hang.remote(), "learner.update")
    assert time.time() - start < 30  # the 2 s deadline, not the call's 600 s
    for actor in (hanging, failing):
        ray.kill(actor)


def test_missing_resources_names_what_the_whole_cluster_lacks():
    from agentgym_core.rl.ray_launcher import missing_resources

    bundles = [{"CPU": 1.0, "GPU": 1.0}] * 2 + [{"CPU": 2.0}]
    assert missing_resources(bundles, {"CPU": 8.0, "GPU": 1.0}) == {"GPU": 1.0}
    assert missing_resources(bundles, {"CPU": 2.0}) == {"CPU": 2.0, "GPU": 2.0}
    assert missing_resources(bundles, {"CPU": 4.0, "GPU": 2.0}) == {}


def test_rollout_workers_on_ray_check_the_weights_they_hold_as_local_ones_do(ray_cluster, tiny_path, tmp_path):
    """The workers sample in bfloat16 while the learner scores in float32: the weight-sync probe sees the gap
    at the start of the run, past a tolerance no bfloat16 copy meets, and stops it naming the check."""
    bf16 = ("rollout.backend_options={dtype: bfloat16}", "rollout.sync_check_tolerance=1e-6")
    with pytest.raises(RemoteCallError, match="rollout.sync_check_tolerance=1e-06"):
        run_training(make_config(tiny_path, tmp_path / "run", *bf16, "trainer.launcher=ray",
                                 "trainer.ray.rollout_workers=2"))
