"""Run directories for the viewer tests, written the way agentgym writes them.

``write_log_run`` builds real :class:`Trajectory` objects and writes them with the rollout logs
module's writer (evaluation layout, or ``rollouts/step_N.jsonl``); ``write_trainer_step`` writes
the trainer's dump format. ``tiny_training_run`` runs the real trainer (tiny random model, WordEnv
over HTTP on loopback) and then a real evaluation, for the browser tests.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from agentgym_core.rollout.logs import RolloutLogWriter
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn

ENVS = {"textcraft": ["crafting", "smelting"], "babyai": ["goto", "pickup"]}


def make_trajectory(rng: random.Random, *, env: str, task_id: int, sample_index: int, turns: int,
                    success: bool, screenshot: str | None = None,
                    grids: list[list[str]] | None = None) -> Trajectory:
    """A plausible multi-turn trajectory with consistent spans, mask and rewards."""
    token_ids, mask, logprobs, turn_models = [], [], [], []
    prompt = [rng.randrange(10, 400) for _ in range(30)]
    token_ids += prompt
    mask += [0] * len(prompt)
    logprobs += [0.0] * len(prompt)
    messages = [{"role": "system", "content": f"You play {env}."},
                {"role": "user", "content": f"Crafting commands:\ncraft 1 stick using 2 planks\n\nGoal: craft item {task_id}."}]
    for k in range(turns):
        start = len(token_ids)
        if k:
            ctx = [rng.randrange(10, 400) for _ in range(8)]
            token_ids += ctx
            mask += [0] * len(ctx)
            logprobs += [0.0] * len(ctx)
        a0 = len(token_ids)
        reply = [rng.randrange(10, 400) for _ in range(rng.randint(5, 15))]
        token_ids += reply
        mask += [1] * len(reply)
        logprobs += [-rng.random() * 3 for _ in reply]
        last = k == turns - 1
        action = "inventory" if k == 0 else f"get {k} planks"
        observation = "Inventory: [oak planks] (2) [stick] (1)" if k == 0 else f"Got {k} planks"
        if last and success:
            observation = "Crafted 1 minecraft:stick"
        reward = 1.0 if (last and success) else 0.0
        info = {"steps": k + 1, "valid": True}
        if screenshot:
            info["screenshot"] = screenshot
        if grids:
            info["grid"] = grids[k]
        text = f"Thought: step {k} of task {task_id}. Action: {action}"
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": observation}]
        turn_models.append(Turn(index=k, context_span=Span(start=start, end=a0),
                                action_span=Span(start=a0, end=len(token_ids)), text=text, action=action,
                                finish_reason="eos", observation=observation, reward=reward,
                                reward_index=len(token_ids) - 1, success=success if last else None,
                                gen_seconds=0.05, env_seconds=0.001, info=info))
    cats = ENVS.get(env, ["-"])
    return Trajectory(env=env, task_id=task_id, seed=None, sample_index=sample_index,
                      category=cats[task_id % len(cats)], messages=messages, token_ids=token_ids, loss_mask=mask,
                      logprobs=logprobs, prompt_length=len(prompt), turns=turn_models,
                      outcome_reward=sum(t.reward for t in turn_models), success=success, terminated=success,
                      truncated=not success, truncation_reason=None if success else "max_turns", max_turns=8,
                      gen_seconds=0.05 * turns, env_seconds=0.001 * turns, wall_seconds=0.06 * turns)


def trajectories(n: int, *, seed: int = 0, group_size: int = 4, success_rate: float = 0.4) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        env = "textcraft" if (k // group_size) % 3 else "babyai"
        turns = rng.randint(1, 6)
        out.append(make_trajectory(rng, env=env, task_id=k // group_size, sample_index=k % group_size, turns=turns,
                                   success=rng.random() < success_rate))
    return out


def write_log_run(run_dir: Path, trajs: list[Trajectory], *, step: int | None = None,
                  include_tokens: bool = True) -> Path:
    """Eval layout (``trajectories.jsonl``) when ``step`` is None, else ``rollouts/step_<step>.jsonl``."""
    path = run_dir / "trajectories.jsonl" if step is None else run_dir / "rollouts" / f"step_{step:06d}.jsonl"
    with RolloutLogWriter(path, step=-1 if step is None else step, include_tokens=include_tokens) as log:
        log.write_all(trajs)
    return path


def write_trainer_step(run_dir: Path, step: int, trajs: list[Trajectory]) -> Path:
    """The trainer's own dump (``trajectories/step_N.jsonl``, one ``Trajectory`` JSON per line)."""
    path = run_dir / "trajectories" / f"step_{step:06d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
    return path


def write_metrics(run_dir: Path, steps: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "metrics.jsonl").open("a") as f:
        for s in range(1, steps + 1):
            f.write(json.dumps({"step": s, "kind": "train", "success": 0.1 * s, "reward": 0.2 * s, "turns": 3.0,
                                "horizon": 4.0, "kl": 0.01 * s, "entropy": 2.0 - 0.1 * s}) + "\n")


def _train(run_dir: Path, *, seed: int) -> None:
    """A real 3-step GRPO run (tiny random model made with ``seed``, WordEnv over loopback HTTP)."""
    import torch
    from word_env import WordPlugin

    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    torch.set_num_threads(1)
    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(WordPlugin(), "word-test")
    model, tokenizer = tiny_chat_model(seed=seed)
    config = load_config(None, [
        "envs=[{name: word, max_concurrency: 1, train_tasks: [0, 1]}]", f"trainer.run_dir={run_dir}", "trainer.steps=3",
        "trainer.save_every=3", "trainer.eval_tasks=2", "trainer.eval_every=1", "trainer.progress=false",
        "trainer.tensorboard=false", "rollout.tasks_per_step=2", "rollout.group_size=3",
        "rollout.max_new_tokens=6", "rollout.max_total_tokens=256", "algorithm.rounds_ctrl.rounds=2",
        "optim.lr=0.01", f"trainer.seed={seed}",
    ])  # two fixed train tasks, so every step has the same tasks to compare
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)


def _eval_checkpoint(checkpoint: Path, out_dir: Path) -> None:
    """``agentgym eval --include-tokens`` of a saved checkpoint, through the CLI, against WordEnv served on loopback."""
    from word_env import WordEnv

    from agentgym_core.cli import main
    from agentgym_core.plugins import PluginManager, get_plugin_manager, reset_plugin_manager
    from agentgym_core.testing import serve_env

    previous = get_plugin_manager()
    reset_plugin_manager(PluginManager(autoload=True, allow=["transformers"]))
    try:
        with serve_env(WordEnv) as url:
            code = main(["eval", "--env", "word", "--env-url", url, "--model", str(checkpoint), "--device", "cpu",
                         "--threads", "1", "--limit", "4", "--n-samples", "2", "--temperature", "1.0",
                         "--max-rounds", "2", "--max-new-tokens", "6", "--num-envs", "1", "--include-tokens",
                         "--out", str(out_dir)])
    finally:
        reset_plugin_manager(previous)
    if code != 0:
        raise RuntimeError(f"agentgym eval exited with {code}")


def tiny_training_run(run_dir: Path) -> Path:
    """Two real 3-step GRPO runs (seeds 0 and 1: ``train``, ``train-seed1``) and a real
    ``agentgym eval --include-tokens`` of the first one's checkpoint (``eval``)."""
    # WordEnv is the trainer tests' small real environment; reuse it rather than write another.
    sys.path.insert(0, str(Path(__file__).parents[1] / "rl"))
    _train(run_dir / "train", seed=0)
    _train(run_dir / "train-seed1", seed=1)
    _eval_checkpoint(run_dir / "train" / "checkpoints" / "step_000003" / "model", run_dir / "eval")
    return run_dir
