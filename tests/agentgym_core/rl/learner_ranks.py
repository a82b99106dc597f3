"""Runs of the tiny trainer on one process or on several gloo learner ranks (spawned processes).

Module-level functions, so ``torch.multiprocessing`` can import them in the spawned ranks. Ranks run
under strict collectives (:mod:`agentgym_core.testing.strict_collectives`): a collective NCCL would
refuse on a GPU run fails them here.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentgym_core import hookimpl

BASE = [
    "envs=[{name: word, max_concurrency: 1}]", "trainer.steps=2", "trainer.save_every=1", "trainer.eval_tasks=0",
    "trainer.progress=false", "trainer.tensorboard=false", "trainer.save_trajectories=false",
    "rollout.tasks_per_step=2", "rollout.group_size=3", "rollout.max_new_tokens=6", "rollout.max_total_tokens=256",
    "algorithm.rounds_ctrl.rounds=2", "optim.lr=0.01", "algorithm.kl.coef=0.01", "algorithm.mini_batches=2",
    "algorithm.drop_zero_advantage=true", "trainer.seed=3",
    # Several learners sample from copies, where auto would turn the behaviour correction on; the runs
    # compared here must compute the same loss.
    "algorithm.off_policy.correction=none",
]


# AdamW's first steps move every weight by about lr whatever its gradient's size, so float noise in a
# near-zero gradient shows up as lr-sized weight differences: rank comparisons use a smaller rate.
RANKS_LR = ["optim.lr=0.001"]


def run(run_dir: str, overrides: list[str], resume: bool = False, stop_after: int | None = None,
        observer: object = None, replay: list | None = None) -> dict:
    """One trainer process (a rank when WORLD_SIZE is set): the word env, the tiny model, seed 0; ``observer``:
    a plugin to register too; ``replay``: the SFT examples ``warm_start.replay`` trains on."""
    import os

    import torch
    from word_env import WordPlugin

    from agentgym_core.testing.strict_collectives import install

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        install("cuda")

    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    torch.set_num_threads(1)
    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(WordPlugin(), "word-test")
    if observer is not None:
        pm.register(observer, "observer-test")
    config = load_config(None, [*BASE, f"trainer.run_dir={run_dir}", *overrides])
    model, tokenizer = tiny_chat_model(seed=0)
    if config.model.lora.enabled:  # as load_policy wraps a loaded model (fresh adapters: rank 0's are broadcast)
        from agentgym_core.rl.policy import wrap_lora

        torch.manual_seed(0)
        model = wrap_lora(model, config.model)
    return train(config, plugin_manager=pm, model=model, tokenizer=tokenizer, resume=resume, stop_after=stop_after,
                 replay=replay)


def run_ranks(world_size: int, run_dir: str, overrides: list[str], resume: bool = False,
              stop_after: int | None = None, observer: object = None, replay: list | None = None) -> None:
    """``world_size`` gloo ranks on loopback, each calling :func:`run` (as torchrun would start them)."""
    from agentgym_core.rl.distributed import spawn

    spawn(run, world_size, run_dir, [*overrides, f"trainer.learners={world_size}"], resume, stop_after, observer,
          replay)


def train_lines(run_dir: str | Path) -> list[dict]:
    lines = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [x for x in lines if x["kind"] == "train"]


def final_weights(run_dir: str | Path, step: int) -> dict:
    from transformers import AutoModelForCausalLM

    path = Path(run_dir) / "checkpoints" / f"step_{step:06d}" / "model"
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def counted_run(run_dir: str, counts_dir: str, overrides: list[str]) -> None:
    """:func:`run` as one of several ranks, counting the episodes this rank sampled and the rows it scored."""
    import os

    import agentgym_core.rl.learner as learner_module
    from agentgym_core.rl.rollout_worker import RolloutWorker

    counts = {"episodes": 0, "scored_rows": 0}
    sample, forward = RolloutWorker._run_with_reruns, learner_module.forward_tokens

    def counting_sample(self, episodes, *args, **kwargs):
        counts["episodes"] += len(episodes)
        return sample(self, episodes, *args, **kwargs)

    def counting_forward(model, sequences, *args, **kwargs):
        # The policy's scoring pass (the reference's scores the same rows); the weight-sync probe's one-row
        # forwards on the same module ask for no entropy and are not rows of the batch.
        if model is learner_module_model[0] and kwargs.get("with_entropy"):
            counts["scored_rows"] += len(sequences)
        return forward(model, sequences, *args, **kwargs)

    learner_module_model: list = [None]
    init = learner_module.Learner.__init__

    def remember_policy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        learner_module_model[0] = self.model

    RolloutWorker._run_with_reruns = counting_sample
    learner_module.forward_tokens = counting_forward
    learner_module.Learner.__init__ = remember_policy
    run(run_dir, overrides)
    Path(counts_dir, f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(counts))



class EventLog:
    """An observer plugin that writes down every event it hears, one file per rank (``rank0.log``, ...)."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir

    def _write(self, event: str) -> None:
        import os

        with Path(self.log_dir, f"rank{os.environ.get('RANK', '0')}.log").open("a") as f:
            f.write(event + "\n")

    @hookimpl
    def agentgym_observe_run_start(self) -> None:
        self._write("run_start")

    @hookimpl
    def agentgym_observe_rollout(self, step: int) -> None:
        self._write(f"rollout {step}")

    @hookimpl
    def agentgym_observe_update(self, step: int) -> None:
        self._write(f"update {step}")

    @hookimpl
    def agentgym_observe_evaluation(self, step: int) -> None:
        self._write(f"evaluation {step}")

    @hookimpl
    def agentgym_observe_run_end(self, error: str | None) -> None:
        self._write(f"run_end {error}")
