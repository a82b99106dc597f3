"""trainer.launcher=ray when an actor dies: a rollout worker is restarted (and counted in the step's
metrics) and re-samples its slice, or the run fails naming the actor, the call and the step; a dead
learner rank fails the run; a stopped run resumes with its weights and every learner rank's RNG."""

from __future__ import annotations

import time

import pytest
from conftest import (
    PLUGINS,
    Gate,
    assert_same_run,
    gated_env,
    gated_guess_server,
    kill_actor_when,
    make_config,
    ray,
    run_training,
    train_lines,
)

from agentgym_core.rl.ray_launcher import RemoteCallError

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one private Ray cluster at a time


def _sampling(actor) -> bool:
    return ray.get(actor.is_collecting.remote(), timeout=60)


def test_a_killed_rollout_worker_is_restarted_and_its_batch_sampled_again(ray_cluster, tiny_path, local_run,
                                                                          tmp_path):
    killed: list[int] = []
    gate = Gate(hold_from=0)  # step 1's collect cannot end before worker 1 is killed in it
    run_dir = tmp_path / "run"
    with gated_guess_server(gate) as url:
        killer = kill_actor_when("-rollout-1", _sampling, killed, gate)
        run_training(make_config(tiny_path, run_dir, "trainer.launcher=ray", "trainer.ray.rollout_workers=2",
                                 "trainer.ray.rollout_worker_restarts=1", gated_env(url)))
    killer.join(timeout=1)
    assert killed, "the rollout worker was never seen sampling"
    assert_same_run(run_dir, local_run)  # the restarted worker got the weights and re-sampled its slice
    # Every step logs its restarts (0.0 when none: a continuous line) and the running total.
    lines = train_lines(run_dir)
    per_step = [x["rollout_worker_restarts"] for x in lines]
    assert sorted(per_step) == [0.0, float(len(killed))], per_step
    assert [x["rollout_worker_restarts_total"] for x in lines] == \
        [sum(per_step[: i + 1]) for i in range(len(per_step))]
    assert all("rollout_worker_restarts" not in x for x in train_lines(local_run))  # local: no workers to restart


def test_a_killed_rollout_worker_without_restarts_fails_the_run_within_a_minute(ray_cluster, tiny_path, tmp_path):
    killed: list[int] = []
    gate = Gate(hold_from=0)
    with gated_guess_server(gate) as url, \
            pytest.raises(RemoteCallError, match=r"rollout worker 1: collect at step 1: its actor died"):
        killer = kill_actor_when("-rollout-1", _sampling, killed, gate)
        run_training(make_config(tiny_path, tmp_path / "run", "trainer.launcher=ray", "trainer.ray.rollout_workers=2",
                                 "trainer.ray.rollout_worker_restarts=0", gated_env(url)))
    killer.join(timeout=1)
    assert killed and gate.opened_at is not None
    assert time.monotonic() - gate.opened_at < 60  # from the kill: Ray reports the death, no timeout waited


def test_a_killed_learner_rank_fails_the_run_naming_the_call_and_the_step(ray_cluster, tiny_path, tmp_path):
    killed: list[int] = []
    run_dir = tmp_path / "run"
    # Step 1 has 2 tasks x 2 samples: the 5th reset is step 2's, held until learner rank 1 is dead.
    gate = Gate(hold_from=4)
    with gated_guess_server(gate) as url, \
            pytest.raises(RemoteCallError, match=r"learner\.\w+ at step 2: its actor died"):
        killer = kill_actor_when("-learner-1", lambda _: gate.held.is_set(), killed, gate)
        run_training(make_config(tiny_path, run_dir, "trainer.launcher=ray", "trainer.learners=2",
                                 "trainer.steps=4", gated_env(url)))
    killer.join(timeout=1)
    assert len(train_lines(run_dir)) == 1  # step 1 trained on both ranks before one died
    assert killed


def test_a_ray_run_stopped_after_a_step_resumes_where_it_was(ray_cluster, tiny_path, local_run, tmp_path):
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.trainer import train

    run_dir = tmp_path / "run"
    # One learner rank, so the run can be compared with the local one token for token: two ranks score and
    # reduce in another order, and AdamW turns step 1's float-noise gradient (policy == reference) into
    # lr-sized moves. Two ranks' sharded checkpoints resume exactly: the dropout test below.
    config = make_config(tiny_path, run_dir, "trainer.launcher=ray", "trainer.save_every=1")
    for resume, stop_after in ((False, 1), (True, None)):  # as if killed after step 1, then --resume
        train(config, plugin_manager=PluginManager(autoload=True, allow=PLUGINS), resume=resume,
              stop_after=stop_after)
    assert_same_run(run_dir, local_run)  # step 2 sampled by the restored weights, trained as uninterrupted


def test_a_resumed_ray_run_draws_the_dropout_an_uninterrupted_one_draws_on_every_learner_rank(
        ray_cluster, tiny_dropout_path, tmp_path):
    import torch

    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.trainer import train

    overrides = ("trainer.launcher=ray", "trainer.learners=2", "trainer.save_every=1")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_training(make_config(tiny_dropout_path, whole, *overrides))
    for resume, stop_after in ((False, 1), (True, None)):  # as if killed after step 1, then --resume
        train(make_config(tiny_dropout_path, cut, *overrides), plugin_manager=PluginManager(autoload=True, allow=PLUGINS),
              resume=resume, stop_after=stop_after)
    saved = torch.load(cut / "checkpoints" / "step_000001" / "trainer_state.pt", weights_only=False)["rng_by_rank"]
    seeded = torch.Generator().manual_seed(3).get_state()  # trainer.seed=3: where each rank's stream starts
    assert len(saved) == 2 and not any(torch.equal(s["torch"], seeded) for s in saved)  # both ranks drew dropout
    assert_same_run(cut, whole)  # step 2's dropout masks, hence losses and trajectories, as uninterrupted
