"""The RL trainer: estimator contract, losses, config, the training loop, checkpoints, logging.

    from agentgym_core.rl import load_config, train
    results = train(load_config("examples/babyai_grpo_cpu.yaml", ["trainer.steps=10"]))

Where things are: ``trainer.train`` (the loop, one function, the same on every rank), ``roles`` (the
Protocols of what it drives) and ``driver`` (rank 0's log, observers and evaluation records; a
stand-in elsewhere that only plays its share of each evaluation), ``losses`` (PPO clip, KL, entropy,
value loss), ``estimator_api`` + ``checks`` (the estimator plugin contract and its checker),
``forward`` (packed/padded per-token forward), ``critic`` (GAE's value model: separate or on the
policy's trunk), ``update`` (epochs x mini-batches),
``config`` (typed config), ``batch`` (task order, tensors),
``curriculum`` (tasks drawn by category pass rate, rollout.curriculum),
``async_rollouts`` (sampling ahead of the learner, rollout.max_staleness), ``ray_launcher``
(trainer.launcher=ray: the roles as Ray actors). Checkpoints, metrics and the memory tools it
shares with fine-tuning are in :mod:`agentgym_core.training`.
"""

from agentgym_core.plugins import lazy_exports

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

# Each name loads with its module on first use: the recipe schema (rl.config) imports without torch, the
# trainer pulls in the rollout engine and the HTTP client only when a run starts.
lazy_exports(__name__, {
    "AdvantageBatch": "agentgym_core.rl.estimator_api",
    "AdvantageConfig": "agentgym_core.rl.estimator_api",
    "AdvantageOutput": "agentgym_core.rl.estimator_api",
    "ConfigError": "agentgym_core.recipes",
    "Estimator": "agentgym_core.rl.estimator_api",
    "EstimatorCheckError": "agentgym_core.rl.checks",
    "TrainConfig": "agentgym_core.rl.config",
    "check_estimator": "agentgym_core.rl.checks",
    "load_config": "agentgym_core.rl.config",
    "place_rewards": "agentgym_core.rl.rewards",
    "policy_spans": "agentgym_core.rl.rewards",
    "save_config": "agentgym_core.rl.config",
    "train": "agentgym_core.rl.trainer",
})
