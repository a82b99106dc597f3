"""The training kit that the RL trainer (:mod:`agentgym_core.rl`) and fine-tuning
(:mod:`agentgym_core.finetune`) share: nothing here knows of either.

Where things are: ``checkpoint`` (atomic, resumable checkpoints and RNG state), ``tracking``
(metrics to JSONL, TensorBoard, wandb), ``optimizer_on_disk`` (optimizer state in a file between
steps), ``activation_checkpointing`` (recompute activations only in long training forwards) and
``memory`` (handing a finished phase's memory back to the operating system). Import the module you
need; this package imports none of them, so it costs nothing.
"""
