"""An RL recipe end to end: the optional supervised warm start, then online RL.

``rl`` knows nothing of fine-tuning and ``finetune`` builds on ``rl``'s stack; this module is where
the two meet, so neither package imports the other's entry points.
"""

from __future__ import annotations

from typing import Any

from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rl.config import TrainConfig

__all__ = ["plan_text", "run_rl_recipe"]


def run_rl_recipe(
    config: TrainConfig,
    *,
    resume: bool = False,
    plugin_manager: PluginManager | None = None,
    model: Any = None,
    tokenizer: Any = None,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """SFT on ``config.warm_start`` when the recipe has one (read back when it already finished), then
    :func:`agentgym_core.rl.trainer.train` from the fine-tuned weights.

    Without ``model``, ``config.model.path`` must name a model on this machine (checked first).
    Returns the trainer's results; after a warm start also ``eval_base`` (the model before SFT) and
    ``eval_sft`` (after SFT, which is RL's ``eval_before``).
    """
    if model is None:  # before any phase, and before torch loads: a missing model.path fails here once
        config.model.check_present()
    from agentgym_core.rl.policy import load_policy
    from agentgym_core.rl.trainer import train

    pm = plugin_manager or get_plugin_manager()
    if config.trainer.progress and not resume:
        print(plan_text(config), flush=True)
    if config.warm_start is None:
        return train(config, resume=resume, plugin_manager=plugin_manager, model=model, tokenizer=tokenizer,
                     stop_after=stop_after)

    from agentgym_core.finetune.run import train_on_expert_solved, warm_start_examples, warm_start_sft
    from agentgym_core.rl.plugin_options import final_horizon_of

    if config.trainer.learners > 1:  # learner ranks load the warm start's weights from its model directory
        warm = warm_start_sft(config, plugin_manager=pm, resume=resume)
        config = train_on_expert_solved(config, final_horizon_of(config, pm))
        tuned = config.model_copy(update={"model": config.model.model_copy(update={"path": str(warm.model_path)})})
        # no tokenizer in this process: replay reads the token ids the records hold (expert demos, rollout logs)
        replay = warm_start_examples(config, None, None) if config.warm_start.replay.coef > 0 else None
        results = train(tuned, resume=resume, stop_after=stop_after, eval_before=warm.eval_after, replay=replay)
    else:
        if model is None:
            model, tokenizer = load_policy(config.model, runtime=config.runtime)
        warm = warm_start_sft(config, plugin_manager=pm, model=model, tokenizer=tokenizer,
                              resume=resume)  # trains model in place
        config = train_on_expert_solved(config, final_horizon_of(config, pm))  # rl_tasks: solved
        replay = warm_start_examples(config, model, tokenizer) if config.warm_start.replay.coef > 0 else None
        results = train(config, resume=resume, plugin_manager=pm, model=model, tokenizer=tokenizer,
                        stop_after=stop_after, eval_before=warm.eval_after, replay=replay)
    return {"eval_base": warm.eval_before, "eval_sft": warm.eval_after, **results}


def plan_text(config: TrainConfig) -> str:
    """The phases the recipe will run, in order, with their sizes (each shows a progress bar with its time left)."""
    cfg, phases = config, []
    evals = cfg.trainer.eval_tasks * len(cfg.envs)
    warm = cfg.warm_start
    if warm is not None:
        if warm.expert is not None:
            phases.append(f"expert demonstrations: {warm.expert.n} episodes")
        if warm.eval_base and cfg.trainer.eval_before and evals:
            phases.append(f"held-out evaluation of the base model: {evals} tasks")
        cap = f", at most {warm.data.max_examples} examples" if warm.data.max_examples else ""
        phases.append(f"SFT warm start: {warm.sft.epochs} epoch(s) of batches of {warm.sft.batch_size}{cap}")
        if evals:
            phases.append(f"held-out evaluation after SFT: {evals} tasks")
    elif cfg.trainer.eval_before and evals:
        phases.append(f"held-out evaluation before RL: {evals} tasks")
    per_step = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    replay = f", each update replaying {warm.replay.examples} SFT examples" if warm and warm.replay.coef > 0 else ""
    solved = " on the tasks the expert solved in time" if warm and warm.expert and warm.expert.rl_tasks == "solved" else ""
    phases.append(f"RL: {cfg.trainer.steps} steps of {per_step} episodes{solved} ({cfg.algorithm.estimator}{replay})")
    if evals:
        phases.append(f"held-out evaluation after RL: {evals} tasks")
    lines = [f"  {i}/{len(phases)} {p}" for i, p in enumerate(phases, start=1)]
    return "plan (each phase shows a progress bar with its time left):\n" + "\n".join(lines)
