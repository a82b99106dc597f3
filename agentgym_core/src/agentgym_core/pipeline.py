"""An RL recipe end to end: the optional supervised warm start, then online RL.

``rl`` knows nothing of fine-tuning and ``finetune`` builds on ``rl``'s stack; this module is where
the two meet, so neither package imports the other's entry points.
"""

from __future__ import annotations

from typing import Any

from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rl.config import TrainConfig

__all__ = ["run_rl_recipe"]


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

    Returns the trainer's results; after a warm start also ``eval_base`` (the model before SFT) and
    ``eval_sft`` (after SFT, which is RL's ``eval_before``).
    """
    from agentgym_core.rl.trainer import train

    pm = plugin_manager or get_plugin_manager()
    if config.warm_start is None:
        return train(config, resume=resume, plugin_manager=plugin_manager, model=model, tokenizer=tokenizer,
                     stop_after=stop_after)

    from agentgym_core.finetune.run import warm_start_sft
    from agentgym_core.rl.checkpoint import load_policy_weights
    from agentgym_core.rl.setup import load_policy

    if config.trainer.learners > 1:  # learner ranks load the warm start's weights from its model directory
        warm = warm_start_sft(config, plugin_manager=pm)
        tuned = config.model_copy(update={"model": config.model.model_copy(update={"path": str(warm.model_path)})})
        results = train(tuned, resume=resume, stop_after=stop_after, eval_before=warm.eval_after)
    else:
        if model is None:
            model, tokenizer = load_policy(config.model)
        warm = warm_start_sft(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
        load_policy_weights(model, warm.checkpoint)  # a no-op after training in place; a resumed run needs it
        results = train(config, resume=resume, plugin_manager=pm, model=model, tokenizer=tokenizer,
                        stop_after=stop_after, eval_before=warm.eval_after)
    return {"eval_base": warm.eval_before, "eval_sft": warm.eval_after, **results}
