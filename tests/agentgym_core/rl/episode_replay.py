"""Rolling out one step's episodes whole or split over rollout workers, with re-runs of failed episodes.

:class:`FlakyWordEnv` fails a step whenever the model's reply has a length divisible by 3: a
failure that follows from what was sampled (never from timing), so a run that replays its samples
replays its failures and re-runs too.
"""

from __future__ import annotations

from typing import Any

from word_env import WordEnv

from agentgym_core import hookimpl


class FlakyWordEnv(WordEnv):
    name = "flaky"

    def step(self, action: str):
        if len(action) % 3 == 0:
            raise RuntimeError("the environment's server fell over")
        return super().step(action)


class FlakyPlugin:
    @hookimpl
    def agentgym_register_envs(self, register) -> None:
        register("flaky", FlakyWordEnv, summary="test env that fails on some replies")


OVERRIDES = [
    "envs=[{name: flaky, max_concurrency: 2}]",
    "rollout.tasks_per_step=4",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "rollout.max_total_tokens=256",
    "rollout.rerun_failed=2",
    "trainer.seed=5",
    "algorithm.rounds_ctrl.rounds=2",
]


def attempts_by_episode(
    pm: Any, overrides: list[str], workers: int, model: Any = None, tokenizer: Any = None
) -> tuple[dict[tuple[int, int], list[list[int]]], float]:
    """Step 0 rolled out by ``workers`` rollout workers (each its slice): every episode's attempts'
    token ids in order, keyed by (task, group member); and how many episodes were re-run."""
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.envs import make_backend, open_envs
    from agentgym_core.rl.rollout_worker import RolloutWorker

    config = load_config(None, [*OVERRIDES, *overrides])
    scheduler = pm.get("round_scheduler", config.algorithm.rounds_ctrl.type)(config.algorithm.rounds_ctrl)
    out: dict[tuple[int, int], list[list[int]]] = {}
    reruns = 0.0
    with open_envs(pm, config.envs) as envs:
        for i in range(workers):
            backend, _ = make_backend(pm, config, model, tokenizer)
            worker = RolloutWorker(
                config, envs, backend, scheduler=scheduler, receives_weights=False, shard=(i, workers)
            )
            result = worker.collect(0)
            worker.close()
            reruns += result.metrics["reruns"]
            for t in result.trajectories:
                out.setdefault((t.task_id, t.sample_index), []).append(list(t.token_ids))
    return out, reruns
