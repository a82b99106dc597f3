"""`train(config)`: the online-RL loop, top to bottom, driving two roles.

    for step in steps:
        rollout worker: sample tasks -> trajectories
        learner:        score (old/reference log-probs) -> advantages (estimator plugin) -> update
        rollout worker: new weights
        driver:         log -> periodic evaluation -> checkpoint

The roles live next to this file, behind the interfaces of :mod:`agentgym_core.rl.roles`:
:class:`~agentgym_core.rl.learner.Learner` (weights, optimizer, checkpoints; FSDP2-sharded over
``trainer.learners`` ranks) and :class:`~agentgym_core.rl.rollout_worker.RolloutWorker` (backend,
engines, environment clients). With several learner ranks every rank runs this same loop: it
samples its share of each step's episodes and scores its share of the rows, and receives the
whole step (:mod:`agentgym_core.rl.colocated`), so every rank computes the same advantages. Rank 0
drives: its :class:`~agentgym_core.rl.driver.Driver` writes the log and tells observers, while the
other ranks' :class:`~agentgym_core.rl.driver.NullDriver` does nothing, so the loop asks which rank it
runs on only where the driver advances the round schedule. Held-out evaluations play on every rank's
engine, each rank its share of the panel; the driver logs the gathered record. Everything else (losses,
estimators, schedulers, batching) lives in small modules next to this one; this file is the order
in which they are used.

Where the roles live is the launcher's choice, not the loop's: ``trainer.launcher=ray`` runs this
same loop in a driver that holds no model, with the learner ranks and rollout workers as Ray
actors answering the same calls (:mod:`agentgym_core.rl.ray_launcher`). ``rollout.max_staleness
> 0`` lets the rollout side sample ahead of the learner (:mod:`agentgym_core.rl.async_rollouts`).
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from agentgym_core.evaluation.results import metric_record
from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rl.async_rollouts import AsyncRollouts, staleness_metrics
from agentgym_core.rl.batch import apply_truncation_policy, build_batch, step_seed, trainable_trajectories
from agentgym_core.rl.colocated import RankRollouts, rollout_copy
from agentgym_core.rl.config import TrainConfig, check_group_size
from agentgym_core.rl.curriculum import TaskCurriculum, curriculum_for
from agentgym_core.rl.distributed import (
    DistContext,
    barrier,
    init_from_environment,
    pin_one_gpu,
    spawn,
    visible_gpus,
)
from agentgym_core.rl.driver import Driver, NullDriver
from agentgym_core.rl.dynamic_sampling import SignalSampling, count_mixed_groups, mixed_groups_only
from agentgym_core.rl.envs import evaluation_log_path
from agentgym_core.rl.estimator_api import AdvantageBatch, AdvantageOutput
from agentgym_core.rl.guards import WeightSyncProbe, check_env_failures
from agentgym_core.rl.learner import Learner, ScoredBatch
from agentgym_core.rl.losses import masked_mean
from agentgym_core.rl.off_policy import mismatch_alarm, mismatch_by_label, mismatch_stats, mismatch_sums
from agentgym_core.rl.plugin_options import backend_capabilities, bind_plugin_options
from agentgym_core.rl.policy import load_policy, load_policy_for_ranks, resolve_device
from agentgym_core.rl.roles import LearnerRole, PlacedRollouts, Roles, RolloutRole
from agentgym_core.rl.rollout_worker import RolloutResult, build_rollout_worker
from agentgym_core.rl.sft_replay import ReplayPool, check_replay_pool, replay_fields
from agentgym_core.rl.update import UpdateInputs
from agentgym_core.rl.weight_sync import engine_dtype, weight_sync_metrics
from agentgym_core.rollout.backend import capabilities_of
from agentgym_core.schedulers import final_horizon as scheduler_final_horizon
from agentgym_core.training.checkpoint import latest_checkpoint
from agentgym_core.training.memory import (
    HeapTrimmer,
    PhasePeak,
    prefer_expandable_cuda_segments,
    release_memory,
)

__all__ = ["train"]


def train(
    config: TrainConfig,
    *,
    resume: bool = False,
    plugin_manager: PluginManager | None = None,
    model: Any = None,
    tokenizer: Any = None,
    stop_after: int | None = None,
    eval_before: dict[str, Any] | None = None,
    replay: ReplayPool | None = None,
) -> dict[str, Any]:
    """Train the policy as ``config`` says; returns ``{"final": metrics, "eval_before", "eval_after"}``.

    ``model``/``tokenizer`` replace loading ``config.model.path`` (tests, notebooks).
    ``stop_after`` ends the run after that many steps of this call, as a kill would (tests).
    ``replay`` is the warm start's SFT examples as ``(token_ids, loss_mask)`` pairs, which
    ``warm_start.replay.coef > 0`` keeps in every update (:mod:`agentgym_core.rl.sft_replay`).
    ``eval_before`` is a held-out evaluation of the starting policy made elsewhere (a warm start's,
    on the same tasks and horizon), used instead of evaluating again (under torchrun: the same on every rank,
    which all play a share of an evaluation that is run).

    With ``trainer.learners = N > 1`` and no process group yet, N learner processes are spawned on
    this machine (each loads the model from ``config.model.path`` and discovers plugins itself);
    under ``torchrun`` every rank calls ``train`` and rank 0 returns the results.
    """
    ranks_running = int(os.environ.get("WORLD_SIZE", "1")) > 1
    replay = check_replay_pool(config, replay)  # before anything loads
    if resolve_device(config.model.device).type == "cuda":  # before anything starts CUDA; spawned ranks inherit it
        prefer_expandable_cuda_segments(backend_capabilities(config, plugin_manager).expandable_segments)
    if config.trainer.launcher == "ray":
        if model is not None:
            raise ValueError("trainer.launcher=ray places the learner ranks and rollout workers as Ray actors, which "
                             "load config.model.path themselves: model= cannot be passed (save it and set model.path)")
        from agentgym_core.rl.ray_launcher import RayRoles

        pm = plugin_manager or get_plugin_manager()
        return _train(bind_plugin_options(config, pm), pm, RayRoles, resume=resume, stop_after=stop_after,
                      eval_before=eval_before, replay=replay)
    if config.trainer.learners > 1 and not ranks_running:
        if model is not None or plugin_manager is not None:
            raise ValueError("trainer.learners > 1 spawns fresh processes: they load config.model.path and installed "
                             "plugins themselves, so model=/plugin_manager= cannot be passed (or start the ranks "
                             "yourself with torchrun and call train() in each)")
        return _spawn_learners(config, resume=resume, stop_after=stop_after, eval_before=eval_before, replay=replay)
    pm = plugin_manager or get_plugin_manager()
    config = bind_plugin_options(config, pm)  # estimator/scheduler plugins get their own typed options
    return _train(config, pm, _LocalRoles.with_model(model, tokenizer), resume=resume, stop_after=stop_after,
                  eval_before=eval_before, replay=replay)


PlaceRoles = Callable[[TrainConfig, PluginManager, DistContext], Roles]


def _train(config: TrainConfig, pm: PluginManager, place_roles: PlaceRoles, *, resume: bool, stop_after: int | None,
           eval_before: dict[str, Any] | None, replay: ReplayPool | None) -> dict[str, Any]:
    """The loop, the same on every rank; ``place_roles(config, pm, ctx)`` says where the learner and the rollout
    worker live (:class:`_LocalRoles`: in this process; the Ray launcher: actors answering the same calls)."""
    cfg, alg = config, config.algorithm
    run_dir = Path(cfg.trainer.run_dir)
    ctx = init_from_environment(resolve_device(cfg.model.device), timeout_s=cfg.trainer.collective_timeout_s)
    if ctx.distributed and ctx.world_size != cfg.trainer.learners:
        raise ValueError(f"trainer.learners={cfg.trainer.learners} but {ctx.world_size} ranks were started")
    # Rank 0 drives: it writes the run directory, tells observers and logs evaluations (all ranks play them).
    driver: Driver | NullDriver = Driver(cfg, pm) if ctx.is_main else NullDriver(cfg)
    error: BaseException | None = None
    metrics: dict[str, float] = {}
    try:
        # ---- setup: plugins, policy, learner (reference, critic, optimizer), rollout side ------------
        registered = pm.registration("advantage_estimator", alg.estimator)
        estimate = registered.obj
        # GRPO/RLOO with one sample per task would train nothing
        check_group_size(cfg, estimate, registered.declared("min_group_size"))
        scheduler = pm.get("round_scheduler", alg.rounds_ctrl.type)(alg.rounds_ctrl)
        curriculum = curriculum_for(cfg.rollout)  # None unless rollout.curriculum draws tasks by pass rate
        checkpoint = _checkpoint_to_resume(run_dir) if resume else None
        random.seed(cfg.trainer.seed)
        torch.manual_seed(cfg.trainer.seed)
        roles = place_roles(cfg, pm, ctx)
        results: dict[str, Any] = {}
        with contextlib.ExitStack() as stack:
            stack.enter_context(HeapTrimmer(cfg.runtime.heap_trim_interval_s))  # RSS follows what phases hold
            learner = roles.learner(stack)  # the KL reference: these initial weights
            start_step = _restore(checkpoint, learner, scheduler, curriculum) if checkpoint is not None else 0
            placed = roles.rollout_worker(stack, scheduler, curriculum)  # on every local rank
            sync_dtype = engine_dtype(cfg, ctx.device)  # what the rollout engine holds: what the learner sends
            if checkpoint is not None and placed.receives_weights:  # sample from the restored weights
                placed.load_weights(learner.rollout_weights(sync_dtype))
            driver.open(stack, placed, start_step=start_step, resume=resume)
            # A backend with its own copy of the weights must score a fixed probe as the learner does, from the
            # start and after every sync (rl/guards.py). The Ray driver holds no tokenizer, and checks nothing.
            sync_probe = _sync_probe(cfg, roles.tokenizer, placed)
            if sync_probe is not None:  # every rank checks its own engine
                placed.check_weights(sync_probe.expect(learner, start_step))  # collective on several ranks
            final_horizon = scheduler_final_horizon(scheduler, cfg.trainer.steps)  # what evaluations play
            driver.log_panel(placed, final_horizon)  # the tasks every evaluation plays, how, and the hash

            # ---- evaluation before training (every rank its share; a resumed run reads it back from its log) --
            results.update(driver.evaluate_before(placed, roles.phase_meter(), start_step=start_step,
                                                  horizon=final_horizon, known=eval_before, resumed=resume))

            last_step = cfg.trainer.steps if stop_after is None else min(cfg.trainer.steps, start_step + stop_after)
            worker = _sampling(stack, placed, cfg, pipelined=roles.pipelined, first_step=start_step,
                               last_step=last_step)
            for step in driver.steps(start_step, last_step):
                t_step = time.perf_counter()
                # ---- 1-2. rollouts: group_size samples per task, per env, horizon from the scheduler --
                # With several local ranks each samples its slice; every rank receives the whole step.
                with roles.phase_meter() as rollout_peak:
                    rollout = worker.collect(step)
                release_memory()  # the rollout's KV caches, before the learner's largest allocations
                driver.observe_rollout(step, rollout.trajectories)
                staleness = staleness_metrics(rollout.trajectories, step)  # synchronous samples: version `step`
                trainable, infra_failed, logged_as = _episodes_to_train(rollout.trajectories, cfg, step)

                # ---- 3. rewards on policy tokens, old and reference log-probs (each rank its share) ---
                update_peak = roles.phase_meter().start()  # scoring and the update: stopped after step 5
                batch = build_batch(trainable, invalid_action_penalty=alg.invalid_action_penalty)
                scored = learner.score(batch, temperature=cfg.rollout.temperature)
                # the sampler/learner mismatch per env and worker, before the update: past stop_kl it trains nothing
                labels, mismatch, stopped = _mismatch_before_update(batch, rollout, logged_as, scored, cfg, step, driver)

                # ---- 4. advantages from the estimator plugin (every rank: the same scores, the same result)
                adv = estimate(_advantage_batch(batch, scored), alg.advantage)
                keep = list(range(len(batch.sequences))) if stopped is None else []
                if alg.drop_zero_advantage:  # rows with no signal only dilute the loss
                    keep = [i for i in keep if bool((adv.advantages[i] != 0).any())]
                inputs = _update_inputs(batch.sequences, scored, adv, keep, labels, replay, cfg, step) if keep else None

                # ---- 5. policy (and critic) update --------------------------------------------------------
                update_metrics: dict[str, float] = {}
                if inputs is not None:
                    generator = torch.Generator().manual_seed(step_seed(cfg.trainer.seed, "minibatch", step))
                    update_metrics = learner.update(inputs, temperature=cfg.rollout.temperature, generator=generator)
                    # without a scoring pass the update measured the mismatch, and skipped its step past stop_kl
                    stopped = _sampler_mismatch(update_metrics, cfg, step, warn=driver.warns)
                learner.step_schedule()
                update_peak.stop()
                release_memory()  # activations and logits of the update, before the next rollout

                # ---- 6. metrics, and the round schedule advanced on them ----------------------------------
                driver.observe_update(step, update_metrics)
                metrics = {**_step_metrics(rollout, scored, adv, update_metrics, staleness, mismatch,
                                           horizon=scheduler.horizon(step), lr=learner.lr, trained=len(keep),
                                           infra_failed=infra_failed),
                           **rollout_peak.as_metrics("_rollout"), **update_peak.as_metrics("_update")}
                # Before the new weights are published: a pipelined rollout side (Ray, max_staleness) starts the
                # next step as soon as they are, and reads the schedule's state then. The driver decides the
                # schedule; the other ranks receive its state with their next collect (rl/colocated.py).
                if ctx.is_main:
                    if curriculum is not None:
                        curriculum.update(rollout.trajectories)
                    scheduler.update(step, metrics)  # every metric but time_step, which ends after step 7
                if stopped is not None:  # every rank holds the same statistics: all stop, the tripping step logged
                    driver.log(step + 1, {**metrics, "mismatch_stopped": 1.0, "time_step": time.perf_counter() - t_step})
                    raise SamplerMismatchError(stopped)

                # ---- 7. weights to the rollout side (every local rank's own engine) ------------------------
                if worker.receives_weights:
                    t_sync = time.perf_counter()
                    weights = learner.rollout_weights(sync_dtype)  # cast, then gathered tensor by tensor
                    probe = sync_probe.expect(learner, step + 1) if sync_probe is not None else None
                    worker.load_weights(weights, probe)
                    metrics.update(weight_sync_metrics(learner, time.perf_counter() - t_sync))
                    if probe is not None and probe.gap is not None:  # checked now (synchronous)
                        metrics["weight_sync_gap"] = probe.gap
                    del weights

                # ---- 8. log (the driver) ---------------------------------------------------------------------
                metrics["time_step"] = time.perf_counter() - t_step
                driver.log(step + 1, metrics)
                driver.save_trajectories(step, rollout.trajectories,
                                         [logged_as.get(id(t), t) for t in batch.trajectories], adv.advantages)

                # ---- 9. periodic evaluation on held-out tasks (every rank its share; the driver logs it) ------
                done = step + 1
                if cfg.trainer.eval_tasks and done < cfg.trainer.steps and _every(cfg.trainer.eval_every, done):
                    driver.evaluate(worker, roles.phase_meter(), horizon=final_horizon, step=done)
                    barrier(ctx)  # the driver's logging, not inside the checkpoint's device collectives (NCCL's watchdog)

                # ---- 10. checkpoint (atomic; "step" counts completed steps) ----------------------------------
                _checkpoint_if_due(cfg, learner, roles.tokenizer, scheduler, curriculum, done, run_dir)

            # ---- evaluation after training (every rank its share; the driver logs it; a resumed one keeps episodes)
            if last_step == cfg.trainer.steps and cfg.trainer.eval_tasks:
                results["eval_after"] = driver.evaluate(worker, roles.phase_meter(), horizon=final_horizon,
                                                        step=last_step, resumed=resume and start_step == last_step)
        results["final"] = metrics
        return results
    except BaseException as exc:
        error = exc
        raise
    finally:
        driver.end(metrics, error)  # also when the run failed: observers learn why


def _checkpoint_to_resume(run_dir: Path) -> Path | None:
    """``--resume``: the newest complete checkpoint under ``run_dir``; None for a run stopped before its first one
    that left something to keep (a warm start, the episodes of its evaluation at step 0): RL starts at step 0."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None and not (evaluation_log_path(run_dir, 0).parent.is_dir() or (run_dir / "warm_start").is_dir()):
        raise FileNotFoundError(f"--resume: no complete checkpoint under {run_dir}/checkpoints; start without --resume")
    return checkpoint


def _restore(checkpoint: Path, learner: LearnerRole, scheduler: Any, curriculum: TaskCurriculum | None) -> int:
    """Load ``checkpoint`` into the learner (also each rank's RNG state, where that rank lives), the round
    scheduler and the curriculum; the steps it had completed."""
    state = learner.load(checkpoint)
    scheduler.load_state_dict(state["round_scheduler"])
    if curriculum is not None and state.get("curriculum") is not None:
        curriculum.load_state_dict(state["curriculum"])
    return int(state["step"])


def _sampling(stack: contextlib.ExitStack, placed: PlacedRollouts, cfg: TrainConfig, *, pipelined: bool,
              first_step: int, last_step: int) -> RolloutRole:
    """The rollout side the loop samples from: with dynamic sampling, rounds until enough groups have signal;
    with ``rollout.max_staleness > 0`` (or a pipelined placement), ahead of the learner in a thread, at most
    max_staleness versions behind."""
    worker: RolloutRole = placed
    if cfg.rollout.dynamic_sampling.min_mixed_groups:
        worker = SignalSampling(placed, cfg.rollout.dynamic_sampling)
    if cfg.rollout.max_staleness > 0 or pipelined:
        ahead = AsyncRollouts(worker, max_staleness=cfg.rollout.max_staleness, first_step=first_step,
                              last_step=last_step)
        stack.callback(ahead.stop)
        worker = ahead
    return worker


def _every(interval: int, done: int) -> bool:
    """Whether ``done`` completed steps end a period of ``interval`` steps (0: never)."""
    return bool(interval) and done % interval == 0


def _episodes_to_train(trajectories: list[Any], cfg: TrainConfig, step: int) -> tuple[list[Any], int, dict[int, Any]]:
    """The step's trajectories the update trains on; how many an env error or timeout broke; and, for an
    episode the truncation policy repriced (a copy), the original it came from, by the copy's id (the
    saved trajectories are the originals, with the copy's advantages)."""
    # Trajectories an env error or timeout broke are the infrastructure's failure, not the policy's:
    # left out of the loss and counted.
    trainable, infra_failed = trainable_trajectories(trajectories)
    # Past the budget the run stops naming the env, server and error (every rank: the same step).
    check_env_failures(trajectories, cfg.rollout.max_env_failure_rate, step=step)
    episodes = trainable
    trainable = apply_truncation_policy(trainable, cfg.algorithm.truncated_episodes)  # cut by the budget
    logged_as = {id(t): e for t, e in zip(trainable, episodes, strict=True) if t is not e} \
        if len(trainable) == len(episodes) else {}  # 'drop' keeps the originals themselves
    if cfg.rollout.dynamic_sampling.min_mixed_groups:  # tied groups have no advantage: not trained
        trainable = mixed_groups_only(trainable)
    return trainable, infra_failed, logged_as


def _step_metrics(rollout: RolloutResult, scored: ScoredBatch, adv: AdvantageOutput, update_metrics: dict[str, float],
                  staleness: dict[str, float], mismatch: dict[str, float], *, horizon: int, lr: float, trained: int,
                  infra_failed: int) -> dict[str, float]:
    """One step's metrics (every rank computes them; the driver logs them)."""
    trajectories = rollout.trajectories
    mixed, groups = count_mixed_groups(trajectories)  # groups whose env rewards differ: GRPO's reward signal
    return {
        **metric_record(trajectories),
        **update_metrics,
        "horizon": float(horizon),
        "lr": lr,
        "trajectories": float(len(trajectories)),
        "trained_trajectories": float(trained),
        "infra_failed": float(infra_failed),
        "skipped_update": float(not trained),  # every group tied: no advantage, no optimizer step
        "sampled_tokens": float(scored.mask.sum()),
        **mismatch,  # the scoring pass's entropy and sampler-learner gap, per env and worker too
        "kl": float(masked_mean(scored.token_kl, scored.mask)) if scored.token_kl is not None else 0.0,
        "advantage_abs_mean": float(masked_mean(adv.advantages.abs(), scored.mask)),
        **staleness,
        "time_rollout": rollout.seconds,
        # Wall time in generation calls, and env time summed over (concurrent) trajectories.
        "time_generation": rollout.generation_seconds,
        "time_env": sum(t.env_seconds for t in trajectories),
        "generation_calls": float(rollout.generation_calls),
        "mixed_groups": float(mixed),
        "sampled_groups": float(groups),
        **rollout.metrics,  # sampling rounds; re-runs of failed episodes; per-server throughput, errors
    }


def _sync_probe(cfg: TrainConfig, tokenizer: Any, worker: Any) -> WeightSyncProbe | None:
    """The sync check's probe, when weights are copied to the rollout side (every rank decides alike)."""
    if cfg.rollout.sync_check_tolerance is None or tokenizer is None:
        return None
    if not worker.receives_weights:  # the backend samples the learner's own module
        return None
    return WeightSyncProbe.from_tokenizer(tokenizer, cfg.rollout.sync_check_tolerance)


def _advantage_batch(batch: Any, scored: ScoredBatch) -> AdvantageBatch:
    """What the estimator reads: rewards on the policy's tokens, groups, values, turn spans and states."""
    return AdvantageBatch(token_rewards=scored.token_rewards, response_mask=scored.mask > 0,
                          group_ids=batch.group_ids.to(scored.mask.device),
                          values=scored.old.values if scored.old is not None else None,
                          turn_spans=batch.turn_spans, turn_states=batch.turn_states)


def _mismatch_before_update(batch: Any, rollout: RolloutResult, logged_as: dict[int, Any], scored: ScoredBatch,
                            cfg: TrainConfig, step: int, driver: Driver | NullDriver,
                            ) -> tuple[list[tuple[str, ...]], dict[str, float], str | None]:
    """Each trained row's labels (env, worker), the scoring pass's mismatch statistics over the batch and per
    label, and why the run must stop (None: train on)."""
    labels = _row_labels(batch.trajectories, rollout, logged_as)
    mismatch = _scoring_metrics(scored, cfg.algorithm.off_policy.cap, labels)
    return labels, mismatch, _sampler_mismatch(mismatch, cfg, step, warn=driver.warns)


def _row_labels(trained: list[Any], rollout: Any, logged_as: dict[int, Any]) -> list[tuple[str, ...]]:
    """Each trained row's groups for the mismatch statistics: its environment, and ``worker{i}``, the rollout
    worker (a rank's or a Ray actor's backend) that sampled it, where the step came from several."""
    workers = rollout.workers if len(rollout.workers) == len(rollout.trajectories) > 0 else []
    worker_of = {id(t): i for t, i in zip(rollout.trajectories, workers, strict=False)}
    labels: list[tuple[str, ...]] = []
    for t in trained:
        worker = worker_of.get(id(logged_as.get(id(t), t)))  # a repriced copy counts as its original
        labels.append((t.env,) if worker is None else (t.env, f"worker{worker}"))
    return labels


def _scoring_metrics(scored: Any, cap: float, labels: list[tuple[str, ...]]) -> dict[str, float]:
    """Entropy and the sampler-learner log-prob gap and mismatch over the whole batch, and the mismatch per
    group of ``labels`` (``sampler_kl/{env}``, ``sampler_kl/worker{i}``, ``sampler_kl_worst``), from the
    scoring pass; without one (``algorithm.old_logprobs``) the update reports them over the tokens it trained."""
    if scored.old is None:
        return {}
    entropy = float(masked_mean(scored.old.entropy, scored.mask)) if scored.old.entropy is not None else 0.0
    gap = float(masked_mean((scored.old.logprobs - scored.rollout_logprobs).abs(), scored.mask))
    return {"entropy": entropy, "rollout_logprob_gap": gap,
            **mismatch_stats(scored.old.logprobs, scored.rollout_logprobs, scored.mask, cap=cap),
            **mismatch_by_label(mismatch_sums(scored.old.logprobs, scored.rollout_logprobs, scored.mask, labels))}


class SamplerMismatchError(RuntimeError):
    """The sampler's log-probs are too far from the learner's to train on (``algorithm.off_policy.stop_kl``)."""


def _sampler_mismatch(metrics: dict[str, float], cfg: TrainConfig, step: int, *, warn: bool = True) -> str | None:
    """Why the run must stop, when the sampler and the learner disagree on the sampled tokens past ``stop_kl``
    in the worst group (environment or worker); warns past ``warn_kl``; None when they agree."""
    if "sampler_kl" not in metrics:
        return None
    opts = cfg.algorithm.off_policy
    groups = {k.removeprefix("sampler_kl/"): v for k, v in metrics.items() if k.startswith("sampler_kl/")}
    kl = metrics.get("sampler_kl_worst", metrics["sampler_kl"])
    alarm = mismatch_alarm(kl, warn=opts.warn_kl, stop=opts.stop_kl)
    if alarm == "ok":
        return None
    worst = max(groups, key=lambda g: math.inf if math.isnan(groups[g]) else groups[g]) if groups else None
    where = f"sampler_kl/{worst} {kl:.4g}, over the batch " if worst is not None else ""
    summary = (f"step {step + 1}: the sampler's log-probs are far from the learner's on the tokens it sampled "
               f"({where}sampler_kl {metrics['sampler_kl']:.4g}, "
               f"ratio mean {metrics.get('sampler_ratio_mean', float('nan')):.3g}, "
               f"max {metrics.get('sampler_ratio_max', float('nan')):.3g}, "
               f"{100 * metrics.get('sampler_ratio_over_cap', 0.0):.1f}% of tokens past the cap {opts.cap:g})")
    causes = _mismatch_causes(cfg)
    if alarm == "stop":
        return (f"{summary}, past algorithm.off_policy.stop_kl={opts.stop_kl:g}; this step's update was skipped. "
                f"{causes}. Raise stop_kl (or set it to null) only once you know why.")
    if warn:
        tqdm.write(f"warning: {summary}, past algorithm.off_policy.warn_kl={opts.warn_kl:g}. {causes}.")
    return None


def _mismatch_causes(cfg: TrainConfig) -> str:
    """The likely causes of a sampler/learner mismatch, the one this recipe makes expected first."""
    causes = ("Likely causes: the rollout backend did not receive the latest weights (a weight sync that did "
              "not take), the backend formats the chat differently from the learner (template), or the two run "
              "in different precisions (one in bf16, the other in fp32)")
    if cfg.rollout.constrain_actions and cfg.model.mixed_precision != "no":
        # Measured by bench/precision_gap.py: a float32 learner agrees with the sampler on the same tokens.
        return ("Expected in part with rollout.constrain_actions and updates under bf16 autocast "
                f"(model.mixed_precision={cfg.model.mixed_precision}): the constraint samples action tokens far "
                "down the model's distribution, where bf16's log-probs differ from the float32 sampler's by up to "
                "about 3 nats (bench/precision_gap.py); model.mixed_precision: no removes that part at a slower "
                f"update. {causes}")
    return causes


def _update_inputs(sequences: list[list[int]], scored: Any, adv: Any, keep: list[int],
                   labels: list[tuple[str, ...]], replay: ReplayPool | None, cfg: TrainConfig, step: int) -> UpdateInputs:
    """The kept rows of the step's batch; with ``replay`` (warm_start.replay) also this step's draw of SFT examples."""
    idx = torch.tensor(keep, device=scored.mask.device)
    old = scored.old
    replayed = replay_fields(replay, cfg, step, scored.mask.device) if replay is not None else {}
    return UpdateInputs(
        sequences=[sequences[i] for i in keep], mask=scored.mask[idx], advantages=adv.advantages[idx],
        returns=adv.returns[idx], old_logprobs=old.logprobs[idx] if old is not None else None,
        ref_logprobs=scored.ref_logprobs[idx] if scored.ref_logprobs is not None else None,
        old_values=old.values[idx] if old is not None and old.values is not None else None,
        rollout_logprobs=scored.rollout_logprobs[idx], row_labels=[labels[i] for i in keep], **replayed)


def _checkpoint_if_due(cfg: TrainConfig, learner: LearnerRole, tokenizer: Any, scheduler: Any,
                       curriculum: TaskCurriculum | None, done: int, run_dir: Path) -> None:
    """Every ``save_every`` steps and after the last (collective on several ranks; rank 0 writes)."""
    if done % cfg.trainer.save_every and done != cfg.trainer.steps:
        return
    # Sharded runs write HF weights for the final checkpoint (or every one when asked); else shards only.
    hf_weights = done == cfg.trainer.steps or cfg.trainer.hf_weights_every_checkpoint
    learner.save(run_dir, done, tokenizer=tokenizer, keep=cfg.trainer.keep_checkpoints, hf_weights=hf_weights,
                 extra_state={
        "step": done, "round_scheduler": scheduler.state_dict(), "config": cfg.model_dump(mode="json"),
        "curriculum": curriculum.state_dict() if curriculum is not None else None})


class _LocalRoles:
    """Both roles in this process: the learner (one rank of it), and a rollout worker on every rank.

    On one process the rollout side samples from the learner's own module. Sharded learners (whose
    module holds one shard) and asynchronous rollouts (whose module keeps changing while they sample)
    give a module-sampling backend its own copy of the initial weights, then new weights after every
    update; a backend with its own weights (vLLM) gets no copy. With several ranks every rank's
    worker samples its slice of each step (:class:`~agentgym_core.rl.colocated.RankRollouts`).
    """

    pipelined = False  # rollouts run ahead of the learner only when rollout.max_staleness > 0

    @classmethod
    def with_model(cls, model: Any, tokenizer: Any) -> PlaceRoles:
        """The placement for :func:`_train`: a ``model``/``tokenizer`` handed in, or None to load ``model.path``."""
        return lambda config, pm, ctx: cls(config, pm, ctx, model, tokenizer)

    def __init__(self, config: TrainConfig, pm: PluginManager, ctx: DistContext, model: Any, tokenizer: Any) -> None:
        self.config, self.pm, self.ctx, self.model, self.tokenizer = config, pm, ctx, model, tokenizer
        self.samples_module = capabilities_of(
            pm.registration("rollout_backend", config.rollout.backend).declared("capabilities")).shares_trainer_module
        self.private_copy = self.samples_module and (ctx.distributed or config.rollout.max_staleness > 0)
        self.rollout_model: Any = None

    def learner(self, stack: contextlib.ExitStack) -> Learner:
        if self.model is None and self.samples_module:  # each rank samples from a whole copy: load it whole
            self.model, self.tokenizer = load_policy(self.config.model, device=self.ctx.device,
                                                     runtime=self.config.runtime)
        elif self.model is None:
            # Several ranks: rank 0 reads the weights into host memory, the others build the structure only.
            self.model, self.tokenizer = load_policy_for_ranks(
                self.config.model, self.ctx.device, rank=self.ctx.rank, world_size=self.ctx.world_size,
                runtime=self.config.runtime)
        else:  # a model handed in follows model.device as a loaded one does (tests pass CPU models)
            self.model.to(self.ctx.device)
        if self.samples_module:  # before the learner shards the module and makes float32 masters
            self.rollout_model = rollout_copy(self.model, self.config, self.ctx.device) if self.private_copy \
                else self.model
        learner = Learner(self.config, self.model, tokenizer=self.tokenizer, ctx=self.ctx)
        stack.callback(learner.close)
        return learner

    def rollout_worker(self, stack: contextlib.ExitStack, scheduler: Any,
                       curriculum: TaskCurriculum | None) -> PlacedRollouts:
        ctx = self.ctx
        worker = build_rollout_worker(stack, self.pm, self.config, scheduler=scheduler, curriculum=curriculum,
                                      shard=(ctx.rank, ctx.world_size), model=self.rollout_model,
                                      tokenizer=self.tokenizer, private_copy=self.private_copy,
                                      progress=self.config.trainer.progress and ctx.is_main)
        if not ctx.distributed:
            return worker
        return RankRollouts(worker, ctx, scheduler=scheduler, curriculum=curriculum,
                            env_order=[env.name for env in self.config.envs])

    def phase_meter(self) -> PhasePeak:
        """Both roles run in this process: its peak memory is theirs."""
        return PhasePeak()


# ---- several learner ranks on this machine --------------------------------------------------------------
def _rank_main(config: TrainConfig, resume: bool, stop_after: int | None, eval_before: dict[str, Any] | None,
               replay: ReplayPool | None, result_path: str, gpus: list[str] | None) -> None:
    if gpus is not None:  # before anything starts CUDA in this process
        pin_one_gpu(gpus, int(os.environ["RANK"]))
    pm = get_plugin_manager()
    results = _train(bind_plugin_options(config, pm), pm, _LocalRoles.with_model(None, None), resume=resume,
                     stop_after=stop_after, eval_before=eval_before, replay=replay)
    if int(os.environ["RANK"]) == 0:
        Path(result_path).write_bytes(pickle.dumps(results))


def _spawn_learners(config: TrainConfig, *, resume: bool, stop_after: int | None,
                    eval_before: dict[str, Any] | None, replay: ReplayPool | None) -> dict[str, Any]:
    """``trainer.learners = N``: N processes on this machine, rank 0 drives; its results come back.
    On CUDA each rank sees one GPU of its own (:func:`~agentgym_core.rl.distributed.pin_one_gpu`)."""
    gpus = None
    if resolve_device(config.model.device).type == "cuda":
        gpus = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count())
        if len(gpus) < config.trainer.learners:
            raise ValueError(f"trainer.learners={config.trainer.learners} needs one GPU per learner rank; this machine "
                             f"shows {len(gpus)} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}). "
                             "Lower trainer.learners, or set model.device=cpu")
    with tempfile.TemporaryDirectory() as tmp:
        result_path = str(Path(tmp) / "results.pkl")
        spawn(_rank_main, config.trainer.learners, config, resume, stop_after, eval_before, replay, result_path,
              gpus)
        return pickle.loads(Path(result_path).read_bytes())
