"""Rejection-sampling fine-tuning, repeated: iterative self-improvement (AgentEvol-style).

    for round in 1..R:
        sample K trajectories per training task with the current policy (the rollout engine)
        keep the successful ones: per task the best ``keep_per_task`` (fewest turns, then reward)
        fine-tune on them (SFT, loss on the policy's tokens only; + all earlier rounds' keeps
        with ``accumulate``, + ``data.paths`` with ``include_data``)
        evaluate on held-out tasks; checkpoint

Departures from AgentEvol (Xi et al. 2024): each round continues from the current weights
instead of restarting from the base model (cheaper on a CPU; ``accumulate`` keeps the data
growing as theirs does), and the per-round tasks are consecutive slices of seeded shuffles of
the training split (the RL trainer's task order), so a resumed run samples what an
uninterrupted one would. Kept trajectories are trained with the ids they were sampled with.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agentgym_core.finetune.common import (
    FinetuneResult,
    detach_dequantized_gguf,
    select_examples,
    start_run,
)
from agentgym_core.finetune.config import FinetuneConfig, save_finetune_config
from agentgym_core.finetune.data import Example, TokenizerChat, load_examples
from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rl.batch import step_seed, tasks_for_step
from agentgym_core.rollout.backend import SamplingParams, closing_backend
from agentgym_core.rollout.chat import ChatFormat
from agentgym_core.rollout.engine import EngineConfig, EpisodeSpec, RolloutEngine
from agentgym_core.rollout.logs import RolloutLogWriter
from agentgym_core.rollout.progress import RolloutProgress
from agentgym_core.rollout.trajectory import Trajectory
from agentgym_core.training.checkpoint import (
    latest_checkpoint,
    load_policy_weights,
    load_trainer_state,
    save_checkpoint,
)
from agentgym_core.training.tracking import MetricsWriter

__all__ = ["keep_successes", "run_rejection_sampling"]


def keep_successes(trajectories: Sequence[Trajectory], keep_per_task: int) -> list[Trajectory]:
    """Per (env, task): the successful trajectories, fewest turns first (then higher reward), at most k."""
    by_task: dict[tuple[str, int], list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        if t.success and not t.failed and t.num_sampled_tokens > 0:
            by_task[(t.env, t.task_id)].append(t)
    kept: list[Trajectory] = []
    for key in sorted(by_task):
        ranked = sorted(by_task[key], key=lambda t: (t.num_turns, -t.outcome_reward, t.sample_index))
        kept += ranked[:keep_per_task]
    return kept


def run_rejection_sampling(
    config: FinetuneConfig,
    *,
    model: Any = None,
    tokenizer: Any = None,
    resume: bool = False,
    plugin_manager: PluginManager | None = None,
    stop_after: int | None = None,
) -> FinetuneResult:
    """R rounds of sample -> keep successes -> SFT -> evaluate (see the module docstring).

    Writes ``rounds/round_<r>/{samples,kept}.jsonl`` (rollout logs with tokens), ``metrics.jsonl``
    (one ``kind: round`` line per round, ``kind: eval`` lines) and a checkpoint per round in the RL
    layout (``checkpoints/step_<r>``, ``r`` = completed rounds). ``stop_after`` ends after that
    many rounds of this call (tests).
    """
    from agentgym_core.finetune.sft import run_sft
    from agentgym_core.rl.envs import evaluate, make_backend, open_envs
    from agentgym_core.rl.policy import load_policy

    pm = plugin_manager or get_plugin_manager()
    rs = config.rejection_sampling
    run_dir = start_run(config)
    if model is None:
        model, tokenizer = load_policy(config.model, runtime=config.runtime)
    chat = ChatFormat(TokenizerChat.for_model(model, tokenizer))
    seed_data = select_examples(load_examples(config.data.paths, chat), config.data) if rs.include_data and config.data.paths else []

    # ---- resume: the last round's weights and every round's kept trajectories ----------------------
    start = 0
    kept_so_far: list[Example] = []
    if resume:
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            raise FileNotFoundError(f"resume: no complete checkpoint under {run_dir}/checkpoints; start without resume")
        load_policy_weights(model, checkpoint)
        start = int(load_trainer_state(checkpoint)["step"])
        for r in range(1, start + 1):
            kept_so_far += load_examples(run_dir / "rounds" / f"round_{r}" / "kept.jsonl") \
                if (run_dir / "rounds" / f"round_{r}" / "kept.jsonl").stat().st_size else []
    save_finetune_config(config, run_dir / "config.yaml")
    writer = MetricsWriter(run_dir, tensorboard=config.trainer.tensorboard, resume_step=start if resume else None)
    result = FinetuneResult(run_dir=run_dir, steps=start)
    horizon = config.trainer.eval_max_turns

    backend, shares = make_backend(pm, config, model, tokenizer)  # type: ignore[arg-type]
    with closing_backend(backend), open_envs(pm, config.envs) as envs:
        def held_out(step: int) -> dict[str, Any] | None:
            if not config.trainer.eval_tasks:
                return None
            if not shares:
                backend.load_weights(model.state_dict())
            metrics = evaluate(backend, envs, config, horizon, step)  # type: ignore[arg-type]
            writer.write(step, metrics, kind="eval")
            return metrics

        if config.trainer.eval_before and start == 0:
            result.eval_before = held_out(0)
        last = rs.rounds if stop_after is None else min(rs.rounds, start + stop_after)
        for r in range(start, last):
            t0 = time.perf_counter()
            round_dir = run_dir / "rounds" / f"round_{r + 1}"
            for name in ("samples.jsonl", "kept.jsonl"):  # a round cut short is redone from scratch
                (round_dir / name).unlink(missing_ok=True)
            # ---- 1. sample K per task with the current policy --------------------------------------
            if not shares:
                backend.load_weights(model.state_dict())
            sampled: list[Trajectory] = []
            total = rs.tasks_per_round * rs.samples_per_task * len(envs)
            with RolloutLogWriter(round_dir / "samples.jsonl", step=r + 1, include_tokens=True) as log, \
                    RolloutProgress(total, desc=f"round {r + 1} sampling", max_turns=rs.max_turns, leave=False,
                                    enabled=config.trainer.progress) as line:
                successes = 0

                def sampled_one(traj: Trajectory) -> None:
                    nonlocal successes
                    log.write(traj)
                    successes += bool(traj.success)
                    line.done(traj, success=f"{successes}/{line.finished + 1}")

                for env in envs:
                    tasks = tasks_for_step(env.train_tasks, rs.tasks_per_round, r, config.trainer.seed, env.name)
                    sampling = SamplingParams(temperature=rs.temperature, max_new_tokens=config.rollout.max_new_tokens,
                                              seed=step_seed(config.trainer.seed, "rejection", env.name, r))
                    engine_cfg = EngineConfig(sampling=sampling, max_turns=rs.max_turns,
                                               max_total_tokens=config.rollout.max_total_tokens)
                    with RolloutEngine(backend, env.make_env, num_envs=env.config.max_concurrency, config=engine_cfg,
                                       env_name=env.name) as engine:
                        episodes = [EpisodeSpec(task_id=t, sample_index=k, category=env.categories.get(t))
                                    for t in tasks for k in range(rs.samples_per_task)]
                        sampled += engine.run(episodes, step=r, on_done=sampled_one, on_turn=line.turn)
            # ---- 2. keep the successes (fewest turns first) -----------------------------------------
            kept = keep_successes(sampled, rs.keep_per_task)
            with RolloutLogWriter(round_dir / "kept.jsonl", step=r + 1, include_tokens=True) as log:
                log.write_all(kept)
            new = [Example.from_trajectory(t, source=f"round {r + 1}") for t in kept]
            kept_so_far = kept_so_far + new if rs.accumulate else new
            train_on = [e for e in kept_so_far + seed_data
                        if config.data.max_tokens is None or len(e.token_ids) <= config.data.max_tokens]
            # ---- 3. fine-tune on them (the weights change in place) ---------------------------------
            sft_metrics: dict[str, float] = {}
            if train_on:
                sft = run_sft(config, model=model, tokenizer=tokenizer, examples=train_on, options=rs.sft,
                              run_dir=round_dir, plugin_manager=pm, evaluate=False, checkpoint=False,
                              label=f"round {r + 1}")
                sft_metrics = {f"sft_{k}": v for k, v in sft.final.items()}
            # ---- 4. log, evaluate, checkpoint -------------------------------------------------------
            tasks_sampled = {(t.env, t.task_id) for t in sampled}
            metrics = {
                "round": float(r + 1), "sampled": float(len(sampled)),
                "sample_success": sum(t.success for t in sampled) / max(len(sampled), 1),
                "tasks_solved": len({(t.env, t.task_id) for t in kept}) / max(len(tasks_sampled), 1),
                "kept": float(len(kept)), "trained_on": float(len(train_on)),
                **sft_metrics, "time_round": time.perf_counter() - t0,
            }
            writer.write(r + 1, metrics, kind="round")
            evaluation = held_out(r + 1)
            result.rounds.append({**metrics, "eval": evaluation})
            detach_dequantized_gguf(model)
            result.checkpoint = save_checkpoint(run_dir, r + 1, model=model, tokenizer=tokenizer,
                                                keep=config.trainer.keep_checkpoints,
                                                trainer_state={"step": r + 1, "kind": config.kind,
                                                               "config": config.model_dump(mode="json")})
            result.steps, result.final = r + 1, metrics
            if evaluation is not None:
                result.eval_after = evaluation
    writer.close()
    return result
