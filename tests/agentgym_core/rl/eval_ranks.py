"""Rank body of the evaluation-over-ranks test (module level, so spawned ranks can import it)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

PANEL = [16, 17, 18, 19, 0]  # an odd panel: two ranks get 3 and 2 of its episodes
WON = {17, 0}  # tasks the environment lets the policy win at its first reply (the tiny model wins none)
OVERRIDES = [
    f"envs=[{{name: word, max_concurrency: 1, test_tasks: {PANEL}}}]", f"trainer.eval_tasks={len(PANEL)}",
    "trainer.progress=false", "rollout.max_new_tokens=6", "rollout.max_total_tokens=256", "trainer.seed=3",
]


def _recorded_env(stack: contextlib.ExitStack) -> tuple[list[int], dict[str, list[int]]]:
    """Patch WordEnv and the evaluator until ``stack`` closes: the tasks of :data:`WON` succeed; returns the task
    ids environments are reset to and, per task, the token ids of the trajectory an engine played."""
    from word_env import WordEnv

    import agentgym_core.evaluation.held_out as held_out
    from agentgym_core.env import StepResult

    reset_to: list[int] = []
    tokens: dict[str, list[int]] = {}
    reset, step, play = WordEnv.reset, WordEnv.step, held_out.play

    def recorded_reset(self, task_id, seed=None):
        reset_to.append(task_id)
        self.task_id = task_id
        return reset(self, task_id, seed)

    def recorded_step(self, action):
        if self.task_id in WON:
            self.done = True
            return StepResult(observation="Correct!", reward=1.0, terminated=True, success=True)
        return step(self, action)

    def recorded_play(*args, **kwargs):
        trajectories, stats = play(*args, **kwargs)
        tokens.update({str(t.task_id): list(t.token_ids) for t in trajectories})
        return trajectories, stats

    WordEnv.reset, WordEnv.step, held_out.play = recorded_reset, recorded_step, recorded_play
    stack.callback(setattr, WordEnv, "reset", reset)  # this process may be the test's own
    stack.callback(setattr, WordEnv, "step", step)
    stack.callback(setattr, held_out, "play", play)
    return reset_to, tokens


def _workers(stack: contextlib.ExitStack, run_dir: str, shards: list[tuple[int, int]]) -> list:
    """A rollout worker over the tiny model and WordEnv for each of ``shards``, closed by ``stack``."""
    import torch
    from word_env import WordPlugin

    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.rollout_worker import build_rollout_worker
    from agentgym_core.testing.tiny_model import tiny_chat_model

    torch.set_num_threads(1)
    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(WordPlugin(), "word-test")
    config = load_config(None, [*OVERRIDES, f"trainer.learners={shards[0][1]}", f"trainer.run_dir={run_dir}"])
    scheduler = pm.get("round_scheduler", config.algorithm.rounds_ctrl.type)(config.algorithm.rounds_ctrl)
    workers = []
    for shard in shards:
        model, tokenizer = tiny_chat_model(seed=0)
        workers.append(build_rollout_worker(stack, pm, config, scheduler=scheduler, curriculum=None, shard=shard,
                                            model=model, tokenizer=tokenizer))
    return workers


def evaluate_panel(out_dir: str, world_size: int) -> dict:
    """One held-out evaluation of :data:`PANEL` with the tiny model, greedy, as the trainer makes it: on
    ``world_size`` ranks (strict collectives) or in this process; writes the record, the tasks this rank's
    environment was reset to and the tokens of each task's trajectory (``rank{i}.json``); the tasks of
    :data:`WON` succeed, so the record's success rates say whether each task's outcome landed at its task."""
    import os

    from agentgym_core.rl.colocated import RankRollouts
    from agentgym_core.rl.distributed import DistContext, init_from_environment
    from agentgym_core.testing.strict_collectives import install

    if world_size > 1:
        install("cuda")  # refuse what NCCL would
    ctx = init_from_environment("cpu") if world_size > 1 else DistContext()
    with contextlib.ExitStack() as stack:
        reset_to, tokens = _recorded_env(stack)
        (worker,) = _workers(stack, f"{out_dir}/run", [(ctx.rank, ctx.world_size)])
        placed = RankRollouts(worker, ctx, scheduler=None, curriculum=None, env_order=["word"]) \
            if ctx.distributed else worker
        record = placed.evaluate(2, step=0)
    found = {"record": record, "reset_to": reset_to, "tokens": tokens}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    Path(out_dir, f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(found))
    return found


def evaluate_on_ray_group(out_dir: str, count: int) -> dict:
    """The same evaluation through the Ray launcher's rollout group, over ``count`` workers in this process
    behind stand-ins for their actor handles (the group's side of the calls; no Ray)."""
    from agentgym_core.rl.ray_launcher import RayRolloutGroup

    class Handle:  # what the group calls on an actor handle: method.remote(...) -> a reference
        def __init__(self, worker) -> None:
            self.evaluate_share = type("Call", (), {"remote": staticmethod(worker.evaluate_share)})()

    class Remote:  # the group's _Remote: every reference is its answer already
        ray = None
        step = 0

        def get(self, ref, what, timeout_s=None):
            return ref

    with contextlib.ExitStack() as stack:
        reset_to, tokens = _recorded_env(stack)
        workers = _workers(stack, f"{out_dir}/run", [(i, count) for i in range(count)])
        group = RayRolloutGroup([Handle(w) for w in workers], Remote(), scheduler=None, env_order=["word"],
                                restarts=0)
        record = group.evaluate(2, step=0)
    return {"record": record, "reset_to": reset_to, "tokens": tokens}
