"""The RL trainer: estimator contract, losses, config, the training loop, checkpoints, logging.

    from agentgym_core.rl import load_config, train
    results = train(load_config("examples/babyai_grpo_cpu.yaml", ["trainer.steps=10"]))

Where things are: ``trainer.train`` (the loop, one function), ``losses`` (PPO clip, KL, entropy,
value loss), ``estimator_api`` + ``checks`` (the estimator plugin contract and its checker),
``forward`` (packed/padded per-token forward), ``critic`` (GAE's value model: separate or on the
policy's trunk), ``update`` (epochs x mini-batches),
``config`` (typed config), ``batch`` (task order, tensors),
``curriculum`` (tasks drawn by category pass rate, rollout.curriculum),
``async_rollouts`` (sampling ahead of the learner, rollout.max_staleness), ``ray_launcher``
(trainer.launcher=ray: the roles as Ray actors). Checkpoints, metrics and the memory tools it
shares with fine-tuning are in :mod:`agentgym_core.training`.
"""

from typing import Any

from agentgym_core.rl.checks import EstimatorCheckError, check_estimator
from agentgym_core.rl.config import ConfigError, TrainConfig, load_config, save_config
from agentgym_core.rl.estimator_api import AdvantageBatch, AdvantageConfig, AdvantageOutput, Estimator
from agentgym_core.rl.rewards import place_rewards, policy_spans

__all__ = [
    "AdvantageBatch",
    "AdvantageConfig",
    "AdvantageOutput",
    "ConfigError",
    "Estimator",
    "EstimatorCheckError",
    "TrainConfig",
    "check_estimator",
    "load_config",
    "place_rewards",
    "policy_spans",
    "save_config",
    "train",
]


def __getattr__(name: str) -> Any:
    if name == "train":  # imported lazily: it pulls in the rollout engine and the HTTP client
        from agentgym_core.rl.trainer import train

        return train
    raise AttributeError(f"module 'agentgym_core.rl' has no attribute {name!r}")
