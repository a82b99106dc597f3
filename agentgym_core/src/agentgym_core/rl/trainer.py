"""`train(config)`: the whole online-RL loop in one function, top to bottom.

    for step in steps:
        sample tasks -> rollouts -> rewards -> advantages (estimator plugin)
        -> policy (and critic) update -> weights to the rollout backend -> log
        -> periodic evaluation -> checkpoint

Everything else (losses, estimators, schedulers, batching, checkpoint files) lives in small
modules next to this one; this file is the order in which they are used.
"""

from __future__ import annotations

import copy
import json
import random
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rl.batch import allocate_tasks, build_batch, step_seed, tasks_for_step
from agentgym_core.rl.checkpoint import (
    latest_checkpoint,
    load_policy_weights,
    load_trainer_state,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from agentgym_core.rl.config import TrainConfig, save_config
from agentgym_core.rl.estimator_api import AdvantageBatch
from agentgym_core.rl.forward import ValueHead, forward_tokens, mixed_precision
from agentgym_core.rl.losses import kl_penalty, masked_mean
from agentgym_core.rl.plugin_options import bind_plugin_options
from agentgym_core.rl.setup import build_optimizer, evaluate, load_policy, make_backend, open_envs, summarize
from agentgym_core.rl.tracking import MetricsWriter
from agentgym_core.rl.update import UpdateInputs, ppo_update
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.rollout.engine import EpisodeSpec, RolloutConfig, RolloutEngine, RolloutStats

__all__ = ["train"]


def train(
    config: TrainConfig,
    *,
    resume: bool = False,
    plugin_manager: PluginManager | None = None,
    model: Any = None,
    tokenizer: Any = None,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train the policy as ``config`` says; returns ``{"final": metrics, "eval_before", "eval_after"}``.

    With a ``warm_start`` section also ``eval_base`` (the model before SFT) and ``eval_sft`` (after
    SFT, which is RL's ``eval_before``).

    ``model``/``tokenizer`` replace loading ``config.model.path`` (tests, notebooks).
    ``stop_after`` ends the run after that many steps of this call, as a kill would (tests).
    """
    pm = plugin_manager or get_plugin_manager()
    config = bind_plugin_options(config, pm)  # estimator/scheduler plugins get their own typed options
    cfg, alg = config, config.algorithm
    run_dir = Path(cfg.trainer.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)

    # ---- setup: plugins, policy, reference, critic, optimizer -----------------------------------
    estimate = pm.get("advantage_estimator", alg.estimator)
    scheduler = pm.get("round_scheduler", alg.rounds_ctrl.type)(alg.rounds_ctrl)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        raise FileNotFoundError(f"--resume: no complete checkpoint under {run_dir}/checkpoints; start without --resume")
    random.seed(cfg.trainer.seed)
    torch.manual_seed(cfg.trainer.seed)
    results: dict[str, Any] = {}
    if model is None:
        model, tokenizer = load_policy(cfg.model)  # the initial weights: the KL reference is taken from them
    if cfg.warm_start is not None:  # SFT first (or read back when it finished before): RL starts from it
        from agentgym_core.finetune.run import warm_start_sft

        warm = warm_start_sft(cfg, plugin_manager=pm, model=model, tokenizer=tokenizer)
        load_policy_weights(model, warm.checkpoint)  # a no-op after training in place; a resumed run needs it
        results.update(eval_base=warm.eval_before, eval_sft=warm.eval_after)
    reference = None
    if alg.kl.coef > 0 and not cfg.model.lora.enabled:  # LoRA: the reference is the model with adapters off
        reference = copy.deepcopy(model).eval().requires_grad_(False)
    if checkpoint is not None:
        load_policy_weights(model, checkpoint)
    hidden = model.get_output_embeddings().weight.shape[1]
    value_head = ValueHead(hidden).to(next(model.parameters()).device) if alg.critic.enabled else None
    policy_params = [p for p in model.parameters() if p.requires_grad]
    optimizer, lr_schedule = build_optimizer(
        policy_params, list(value_head.parameters()) if value_head else [], cfg.optim, cfg.trainer.steps)
    start_step = 0
    if checkpoint is not None:
        state = load_trainer_state(checkpoint)
        optimizer.load_state_dict(state["optimizer"])
        lr_schedule.load_state_dict(state["lr_schedule"])
        scheduler.load_state_dict(state["round_scheduler"])
        if value_head is not None:
            value_head.load_state_dict(state["value_head"])
        set_rng_state(state["rng"])
        start_step = int(state["step"])
    backend, shares_module = make_backend(pm, cfg, model, tokenizer)
    pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)

    save_config(cfg, run_dir / "config.yaml")
    writer = MetricsWriter(run_dir, tensorboard=cfg.trainer.tensorboard, wandb_project=cfg.trainer.wandb_project,
                           config=cfg.model_dump(mode="json"), resume_step=start_step if resume else None)
    pm.hook.agentgym_observe_run_start(run_dir=str(run_dir), config=cfg.model_dump(mode="json"))
    final_horizon = max(alg.rounds_ctrl.stages)
    metrics: dict[str, float] = {}

    with open_envs(pm, cfg.envs) as envs:
        engines = {
            env.name: RolloutEngine(
                backend, env.make_env, num_envs=env.config.max_concurrency, scheduler=scheduler, env_name=env.name,
                config=RolloutConfig(max_total_tokens=cfg.rollout.max_total_tokens,
                                     sampling=SamplingParams(temperature=cfg.rollout.temperature,
                                                             top_p=cfg.rollout.top_p,
                                                             max_new_tokens=cfg.rollout.max_new_tokens)))
            for env in envs
        }
        counts = allocate_tasks(cfg.rollout.tasks_per_step, [e.config.weight for e in envs])

        # ---- evaluation before training (a resumed run reads it back from its log) ------------------
        if start_step > 0 and writer.path.exists():
            logged = [json.loads(x) for x in writer.path.read_text().splitlines() if x.strip()]
            before = [x for x in logged if x.get("kind") == "eval" and x.get("step") == 0]
            if before:
                results["eval_before"] = before[-1]
        if cfg.trainer.eval_before and cfg.trainer.eval_tasks and start_step == 0:
            # After a warm start, RL starts from the model SFT just evaluated on the same tasks and horizon.
            sft = results.get("eval_sft")
            results["eval_before"] = {**sft, "step": 0} if sft else evaluate(backend, envs, cfg, final_horizon, step=0)
            writer.write(0, results["eval_before"], kind="eval")
            pm.hook.agentgym_observe_evaluation(step=0, results=results["eval_before"])

        last_step = cfg.trainer.steps if stop_after is None else min(cfg.trainer.steps, start_step + stop_after)
        bar = tqdm(range(start_step, last_step), initial=start_step, total=cfg.trainer.steps,
                   disable=not cfg.trainer.progress, desc="train", dynamic_ncols=True)
        for step in bar:
            t_step = time.perf_counter()
            # ---- 1. sample tasks: a pure function of (seed, step), so resume sees the same order ----
            # ---- 2. rollouts: group_size samples per task, per env, horizon from the scheduler ------
            trajectories = []
            t0 = time.perf_counter()
            for env, n in zip(envs, counts, strict=True):
                tasks = tasks_for_step(env.train_tasks, n, step, cfg.trainer.seed, env.name)
                episodes = [EpisodeSpec(task_id=t, seed=None, sample_index=k, category=env.categories.get(t))
                            for t in tasks for k in range(cfg.rollout.group_size)]
                engine = engines[env.name]
                engine.config.sampling.seed = step_seed(cfg.trainer.seed, "sampling", env.name, step)
                # Per-step stats; the engine also offsets its seed by its call count, which must
                # restart each step for a resumed run to sample what an uninterrupted one did.
                engine.stats = RolloutStats()
                trajectories += engine.run(episodes, step=step)
            rollout_seconds = time.perf_counter() - t0
            pm.hook.agentgym_observe_rollout(step=step, trajectories=trajectories, metrics={})

            # ---- 3. rewards on policy tokens: each turn's reward on its last sampled token ----------
            batch = build_batch([t for t in trajectories if t.num_sampled_tokens > 0])
            precision = mixed_precision(cfg.model.mixed_precision, model)  # old, reference and new alike
            with torch.no_grad(), precision:
                old = forward_tokens(model, batch.sequences, batch.mask, temperature=cfg.rollout.temperature,
                                     packing=alg.packing, max_tokens=alg.micro_batch_tokens, with_entropy=True,
                                     value_head=value_head, pad_token_id=pad_id)
                ref_logprobs = None
                if alg.kl.coef > 0:
                    if reference is not None:
                        ref = forward_tokens(reference, batch.sequences, batch.mask,
                                             temperature=cfg.rollout.temperature, packing=alg.packing,
                                             max_tokens=alg.micro_batch_tokens, pad_token_id=pad_id)
                    else:
                        with model.disable_adapter():
                            ref = forward_tokens(model, batch.sequences, batch.mask,
                                                 temperature=cfg.rollout.temperature, packing=alg.packing,
                                                 max_tokens=alg.micro_batch_tokens, pad_token_id=pad_id)
                    ref_logprobs = ref.logprobs
                    token_kl = kl_penalty(old.logprobs, ref_logprobs, alg.kl.estimator) * batch.mask  # (B, T)
                token_rewards = batch.token_rewards
                if ref_logprobs is not None and alg.kl.in_reward:
                    token_rewards = token_rewards - alg.kl.coef * token_kl

            # ---- 4. advantages from the estimator plugin ---------------------------------------------
            adv = estimate(AdvantageBatch(token_rewards=token_rewards, response_mask=batch.mask > 0,
                                          group_ids=batch.group_ids, values=old.values), alg.advantage)
            keep = list(range(len(batch.sequences)))
            if alg.drop_zero_advantage:  # rows with no signal only dilute the loss
                keep = [i for i in keep if bool((adv.advantages[i] != 0).any())]

            # ---- 5. policy (and critic) update -------------------------------------------------------
            update_metrics: dict[str, float] = {}
            if keep:
                idx = torch.tensor(keep)
                inputs = UpdateInputs(
                    sequences=[batch.sequences[i] for i in keep], mask=batch.mask[idx],
                    advantages=adv.advantages[idx], returns=adv.returns[idx], old_logprobs=old.logprobs[idx],
                    ref_logprobs=ref_logprobs[idx] if ref_logprobs is not None else None,
                    old_values=old.values[idx] if old.values is not None else None)
                generator = torch.Generator().manual_seed(step_seed(cfg.trainer.seed, "minibatch", step))
                with precision:
                    update_metrics = ppo_update(model, optimizer, inputs, alg, temperature=cfg.rollout.temperature,
                                                generator=generator, value_head=value_head,
                                                norm_length=cfg.rollout.max_total_tokens, pad_token_id=pad_id)
            with warnings.catch_warnings():  # a step whose groups all tie makes no optimizer step
                warnings.simplefilter("ignore", UserWarning)
                lr_schedule.step()
            pm.hook.agentgym_observe_update(step=step, metrics=update_metrics)

            # ---- 6. weights to the rollout backend ---------------------------------------------------
            if not shares_module:
                backend.load_weights(model.state_dict())

            # ---- 7. log -----------------------------------------------------------------------------
            horizon = scheduler.horizon(step)
            metrics = {
                **summarize(trajectories),
                **update_metrics,
                "horizon": float(horizon),
                "lr": lr_schedule.get_last_lr()[0],
                "trajectories": float(len(trajectories)),
                "trained_trajectories": float(len(keep)),
                "skipped_update": float(not keep),  # every group tied: no advantage, no optimizer step
                "sampled_tokens": float(batch.mask.sum()),
                "entropy": float(masked_mean(old.entropy, batch.mask)) if old.entropy is not None else 0.0,
                "kl": float(masked_mean(token_kl, batch.mask)) if ref_logprobs is not None else 0.0,
                "rollout_logprob_gap": float(masked_mean((old.logprobs - batch.rollout_logprobs).abs(), batch.mask)),
                "advantage_abs_mean": float(masked_mean(adv.advantages.abs(), batch.mask)),
                "time_rollout": rollout_seconds,
                # Wall time in generation calls, and env time summed over (concurrent) trajectories.
                "time_generation": sum(e.stats.gen_seconds for e in engines.values()),
                "time_env": sum(t.env_seconds for t in trajectories),
                "generation_calls": float(sum(e.stats.generation_calls for e in engines.values())),
                "time_step": time.perf_counter() - t_step,
            }
            scheduler.update(step, metrics)
            writer.write(step + 1, metrics)
            bar.set_postfix(reward=f"{metrics['reward']:.3f}", success=f"{metrics['success']:.2f}",
                            turns=f"{metrics['turns']:.1f}", horizon=horizon,
                            **({"update": "skipped (groups tied)"} if not keep else {}))
            if cfg.trainer.save_trajectories:
                traj_dir = run_dir / "trajectories"
                traj_dir.mkdir(exist_ok=True)
                # Each line is the Trajectory plus the per-token advantages it was trained with
                # (0 off the loss mask), so the viewer shows what was reinforced and with what sign.
                trained = {id(t): adv.advantages[i, : len(t.token_ids)] for i, t in enumerate(batch.trajectories)}
                with (traj_dir / f"step_{step + 1:06d}.jsonl").open("w") as f:
                    for t in trajectories:
                        record = t.model_dump(mode="json")
                        if id(t) in trained:
                            record["advantages"] = [round(float(a), 5) for a in trained[id(t)]]
                        f.write(json.dumps(record) + "\n")

            # ---- 8. periodic evaluation on held-out tasks --------------------------------------------
            done = step + 1
            if cfg.trainer.eval_every and cfg.trainer.eval_tasks and done % cfg.trainer.eval_every == 0 \
                    and done < cfg.trainer.steps:
                ev = evaluate(backend, envs, cfg, final_horizon, step=done)
                writer.write(done, ev, kind="eval")
                pm.hook.agentgym_observe_evaluation(step=done, results=ev)

            # ---- 9. checkpoint (atomic; "step" counts completed steps) -------------------------------
            if done % cfg.trainer.save_every == 0 or done == cfg.trainer.steps:
                save_checkpoint(run_dir, done, model=model, tokenizer=tokenizer, keep=cfg.trainer.keep_checkpoints,
                                trainer_state={
                                    "step": done, "optimizer": optimizer.state_dict(),
                                    "lr_schedule": lr_schedule.state_dict(),
                                    "round_scheduler": scheduler.state_dict(),
                                    "value_head": value_head.state_dict() if value_head is not None else None,
                                    "rng": rng_state(), "config": cfg.model_dump(mode="json"),
                                })
        bar.close()

        # ---- evaluation after training ----------------------------------------------------------------
        finished = last_step == cfg.trainer.steps
        if finished and cfg.trainer.eval_tasks:
            results["eval_after"] = evaluate(backend, envs, cfg, final_horizon, step=cfg.trainer.steps)
            writer.write(cfg.trainer.steps, results["eval_after"], kind="eval")
            pm.hook.agentgym_observe_evaluation(step=cfg.trainer.steps, results=results["eval_after"])
        for engine in engines.values():
            engine.close()
    writer.close()
    results["final"] = metrics
    pm.hook.agentgym_observe_run_end(run_dir=str(run_dir), metrics=metrics, error=None)
    return results
