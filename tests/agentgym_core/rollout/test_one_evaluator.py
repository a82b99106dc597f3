"""`agentgym eval` and the trainer's held-out evaluation are one evaluator: the same tasks, the same model and
greedy sampling give the same results, in the same shape."""

from __future__ import annotations

from dataclasses import dataclass, field

from guess_env import GuessEnv

from agentgym_core.evaluation import EvalConfig, evaluate
from agentgym_core.evaluation.held_out import evaluate_held_out
from agentgym_core.rollout import SamplingParams


@dataclass
class _HeldOut:
    """The part of a trainer's env handle the evaluator reads (agentgym_core.rl.envs.EnvHandle)."""

    test_tasks: list[int]
    categories: dict[int, str] = field(default_factory=dict)
    name: str = "guess"
    max_concurrency: int = 2

    def make_env(self) -> GuessEnv:
        return GuessEnv()


def test_agentgym_eval_and_the_trainers_evaluation_give_the_same_results(tiny_backend, tmp_path):
    config = EvalConfig(env="guess", split="test", limit=4, max_new_tokens=8, max_rounds=3, num_envs=2,
                        out_dir=str(tmp_path / "eval"))
    by_cli = evaluate(config, backend=tiny_backend, make_env=GuessEnv, progress=False)
    catalog = GuessEnv.tasks()
    handle = _HeldOut(test_tasks=catalog.spread("test", None), categories=catalog.category_index())
    by_trainer = evaluate_held_out(tiny_backend, [handle], tasks_per_env=4,
                                   sampling=SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=8, seed=0),
                                   horizon=3, max_total_tokens=config.max_total_tokens, step_timeout_s=30.0,
                                   desc="eval", progress=False)
    assert by_trainer.panel_hash == by_cli.panel_hash  # the same tasks
    assert by_trainer.per_task == by_cli.per_task
    assert by_trainer.overall == by_cli.overall and by_trainer.categories == by_cli.categories
    assert by_trainer.environments == by_cli.environments
    assert by_cli.overall.samples == 4 and by_cli.overall.turns_avg > 0
    record = by_trainer.trainer_record()  # what the trainer logs: its metric names, per task, the panel
    assert record["success"] == by_cli.overall.success_avg and record["guess/turns"] == by_cli.overall.turns_avg
    assert set(record["per_task"]) == {f"guess:{row['task_id']}" for row in by_cli.per_task}
    assert record["wall_seconds"] == by_trainer.timing["wall_seconds"] > 0  # the summary's "evaluation time"


def test_k_samples_a_task_are_one_evaluator_too_and_the_trainer_logs_each_tasks_rate(tiny_backend, tmp_path):
    # `agentgym eval --n-samples 3 --temperature 1` and the trainer's `trainer.eval_samples: 3`
    config = EvalConfig(env="guess", split="test", limit=4, n_samples=3, temperature=1.0, max_new_tokens=8,
                        max_rounds=3, num_envs=2, out_dir=str(tmp_path / "eval"))
    by_cli = evaluate(config, backend=tiny_backend, make_env=GuessEnv, progress=False)
    catalog = GuessEnv.tasks()
    handle = _HeldOut(test_tasks=catalog.spread("test", None), categories=catalog.category_index())
    by_trainer = evaluate_held_out(tiny_backend, [handle], tasks_per_env=4, samples_per_task=3,
                                   sampling=SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8, seed=0),
                                   horizon=3, max_total_tokens=config.max_total_tokens, step_timeout_s=30.0,
                                   desc="eval", progress=False)
    assert by_trainer.panel_hash == by_cli.panel_hash  # the same tasks under the same conditions, K included
    assert by_trainer.per_task == by_cli.per_task  # each episode seeded by its place: the same samples
    order = [r["task_id"] for r in by_trainer.per_task]  # each task's samples side by side
    assert order == [t for t in order[::3] for _ in range(3)] and len(set(order)) == 4
    assert [r["sample_index"] for r in by_trainer.per_task] == [0, 1, 2] * 4
    record = by_trainer.trainer_record()
    assert (record["tasks"], record["samples_per_task"]) == (4, 3)
    for task, rate in record["per_task"].items():
        rows = [r["success"] for r in by_trainer.per_task if f"guess:{r['task_id']}" == task]
        assert len(rows) == 3 and rate == sum(rows) / 3
    one_each = evaluate_held_out(tiny_backend, [handle], tasks_per_env=4,
                               sampling=SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8, seed=0),
                               horizon=3, max_total_tokens=config.max_total_tokens, step_timeout_s=30.0,
                               desc="eval", progress=False)
    assert one_each.panel_hash != by_trainer.panel_hash and one_each.trainer_record()["samples_per_task"] == 1
    assert set(one_each.trainer_record()["per_task"].values()) <= {0, 1}
