"""Pass-rate curriculum: the weights, the draw, the counts, and a run that resumes to the same tasks."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentgym_core import hookimpl
from agentgym_core.env import Env, EpisodeEndedError, ResetResult, StepResult, TaskCatalog
from agentgym_core.rl.config import CurriculumConfig
from agentgym_core.rl.curriculum import (
    PassCounts,
    TaskCurriculum,
    category_weight,
    draw_tasks,
    mixed_group_probability,
    pass_rate,
    tasks_by_category,
)
from agentgym_core.rollout.trajectory import Trajectory

G = 4  # group size of the unit tests


def _traj(category: str | None, success: bool, env: str = "e", failed: bool = False) -> Trajectory:
    return Trajectory(env=env, task_id=0, category=category, success=success, failed=failed)


# ---- the estimate and the weight ----------------------------------------------------------------------------
def test_an_unseen_category_is_estimated_at_one_half_and_the_estimate_never_reaches_0_or_1():
    assert pass_rate(PassCounts()) == 0.5
    assert pass_rate(PassCounts(successes=0.0, attempts=100.0)) == pytest.approx(1 / 102)
    assert pass_rate(PassCounts(successes=100.0, attempts=100.0)) == pytest.approx(101 / 102)


def test_the_chance_of_a_mixed_group_peaks_at_one_half_and_the_weight_is_floored():
    grid = [i / 20 for i in range(21)]
    chances = [mixed_group_probability(p, G) for p in grid]
    assert max(range(21), key=lambda i: chances[i]) == 10 and chances[10] == pytest.approx(1 - 2 / 16)
    assert chances[0] == chances[-1] == 0.0
    assert all(a == pytest.approx(b) for a, b in zip(chances, reversed(chances), strict=True))  # symmetric
    never = PassCounts(successes=0.0, attempts=200.0)  # p = 1/202: a mixed group of 4 about 2% of the time
    assert category_weight(never, G, floor=0.05) == 0.05
    assert category_weight(PassCounts(), G, floor=0.05) == pytest.approx(0.875)


def test_update_decays_old_counts_before_adding_the_steps_own_and_skips_failed_trajectories():
    curriculum = TaskCurriculum(CurriculumConfig(kind="pass_rate", decay=0.5), group_size=G)
    curriculum.update([_traj("a", True), _traj("a", False), _traj("b", True), _traj(None, False)])
    curriculum.update([_traj("a", True), _traj("a", True, failed=True), _traj("x", True, env="other")])
    assert curriculum.counts == {
        ("e", "a"): PassCounts(successes=0.5 * 1 + 1, attempts=0.5 * 2 + 1),
        ("e", "b"): PassCounts(successes=0.5, attempts=0.5),
        ("e", None): PassCounts(successes=0.0, attempts=0.5),  # tasks without a category share one
        ("other", "x"): PassCounts(successes=1.0, attempts=1.0),  # each environment counts its own
    }
    copy = TaskCurriculum(CurriculumConfig(kind="pass_rate"), group_size=G)
    copy.load_state_dict(json.loads(json.dumps(curriculum.state_dict())))  # plain data: checkpoints, Ray calls
    assert copy.counts == curriculum.counts


# ---- the draw -----------------------------------------------------------------------------------------------
def test_tasks_are_grouped_by_category_in_a_fixed_order_with_uncategorised_ones_shared():
    groups = tasks_by_category([5, 1, 4, 2, 3], {5: "b", 1: "a", 4: "b", 2: "a"})
    assert list(groups.items()) == [(None, [3]), ("a", [1, 2]), ("b", [5, 4])]


def test_the_draw_is_a_pure_function_of_seed_step_label_and_counts():
    by_category = {"a": list(range(10)), "b": list(range(10, 20))}
    first = draw_tasks(by_category, [0.9, 0.1], n=6, step=3, seed=1, label="e")
    assert first == draw_tasks(by_category, [0.9, 0.1], n=6, step=3, seed=1, label="e")
    others = [draw_tasks(by_category, [0.9, 0.1], n=6, step=4, seed=1, label="e"),
              draw_tasks(by_category, [0.9, 0.1], n=6, step=3, seed=2, label="e"),
              draw_tasks(by_category, [0.9, 0.1], n=6, step=3, seed=1, label="e:round1")]
    assert all(other != first for other in others)


def test_a_category_with_mixed_outcomes_is_drawn_far_more_than_one_always_or_never_solved():
    curriculum = TaskCurriculum(CurriculumConfig(kind="pass_rate", decay=0.9, floor=0.05), group_size=G)
    for _ in range(50):  # 50 steps of outcomes: "easy" always passes, "hard" never, "coin" half the time
        curriculum.update([_traj("easy", True)] * 8 + [_traj("hard", False)] * 8
                          + [_traj("coin", True)] * 4 + [_traj("coin", False)] * 4)
    by_category = {"coin": list(range(0, 30)), "easy": list(range(30, 60)), "hard": list(range(60, 90))}
    counts = Counter()
    for step in range(50):
        for task in curriculum.tasks_for_step("e", by_category, n=8, step=step, seed=0, label="e"):
            counts[next(c for c, ids in by_category.items() if task in ids)] += 1
    assert counts["coin"] > 5 * counts["easy"] and counts["coin"] > 5 * counts["hard"]
    assert counts["easy"] > 0 and counts["hard"] > 0  # the floor: neither starves
    metrics = curriculum.metrics("e", list(by_category))
    assert metrics["curriculum/e/categories_weighted"] == 1.0  # only "coin" is above the floor
    # A uniform draw of the three would give mixed groups a third of the time; this one, about 0.79.
    assert 0.75 < metrics["curriculum/e/expected_mixed"] < 0.875


def test_tasks_within_a_category_rotate_through_its_shuffle():
    tasks = list(range(12))
    drawn = [t for step in range(3) for t in draw_tasks({"only": tasks}, [1.0], n=4, step=step, seed=0, label="e")]
    assert sorted(drawn) == tasks  # one pass over the category: every task once


# ---- Ray's rollout workers (the calls only; tests/agentgym_core/rl/on_ray runs them under Ray) --------------
def test_ray_rollout_workers_draw_from_the_drivers_counts_and_their_figures_are_not_summed():
    from types import SimpleNamespace

    from agentgym_core.rl.ray_launcher import RayRolloutGroup, RolloutActor
    from agentgym_core.rl.rollout_worker import RolloutResult

    driver = TaskCurriculum(CurriculumConfig(kind="pass_rate"), group_size=G)
    driver.update([_traj("a", True), _traj("a", True), _traj("a", False)])  # p = 3/5
    # Two actors as the driver sees them (a handle's method has .remote), each a RolloutActor around a
    # worker that reports the counts it drew from.
    actors = []
    for _ in range(2):
        worker = SimpleNamespace(curriculum=TaskCurriculum(CurriculumConfig(kind="pass_rate"), group_size=G))
        worker.collect = lambda step, sampling_round, w=worker: RolloutResult([], 1.0, 0.0, 0, {
            "reruns": 1.0, "curriculum/e/expected_mixed": w.curriculum.metrics("e", ["a"])[
                "curriculum/e/expected_mixed"]})
        actor = SimpleNamespace(scheduler=SimpleNamespace(load_state_dict=lambda state: None),
                                curriculum=worker.curriculum, worker=worker)
        actors.append(SimpleNamespace(collect=SimpleNamespace(
            remote=lambda *args, actor=actor, **kwargs: RolloutActor.collect(actor, *args, **kwargs))))
    remote = SimpleNamespace(ray=None, step=0, get=lambda ref, what: ref)
    group = RayRolloutGroup(actors, remote, scheduler=SimpleNamespace(state_dict=dict), env_order=["e"],
                            restarts=0, curriculum=driver)
    result = group.collect(3)
    assert result.metrics["reruns"] == 2.0  # a count: summed over the workers' slices
    # The step's figure, the same in each worker, computed from the driver's counts.
    assert result.metrics["curriculum/e/expected_mixed"] == driver.metrics("e", ["a"])["curriculum/e/expected_mixed"]
    assert result.metrics["curriculum/e/expected_mixed"] != 0.875  # not the empty counts the actors started with


# ---- the trainer --------------------------------------------------------------------------------------------
class LevelsEnv(Env):
    """Three levels of three tasks (and two without a level): "easy" always passes, "hard" never, "coin"
    passes when the reply's length is odd. One turn."""

    name = "levels"
    LEVELS = {"easy": [0, 1, 2], "coin": [3, 4, 5], "hard": [6, 7, 8]}

    def __init__(self) -> None:
        self.task, self.done = 0, True

    @property
    def instruction(self) -> str:
        return "Reply with Action: <anything>"

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits={"train": list(range(11)), "test": [11, 12]}, categories=cls.LEVELS)

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        self.task, self.done = task_id, False
        return ResetResult(observation="Go.")

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EpisodeEndedError("episode over")
        self.done = True
        passed = self.task in self.LEVELS["easy"] or (self.task in self.LEVELS["coin"] and len(action) % 2 == 1)
        return StepResult(observation="ok", reward=float(passed), terminated=True, success=passed)


class _Plugin:
    @hookimpl
    def agentgym_register_envs(self, register) -> None:
        register("levels", LevelsEnv, summary="test env with levels")


@pytest.fixture
def levels_pm():
    from agentgym_core.plugins import PluginManager

    pytest.importorskip("agentgym_estimators")
    pytest.importorskip("agentgym_backend_transformers")
    manager = PluginManager(autoload=True, allow=["estimators", "transformers"])
    manager.register(_Plugin(), "levels-test")
    return manager


def _levels_config(tiny_config, run_dir, **overrides):
    return tiny_config(run_dir, **{
        "envs": "[{name: levels, max_concurrency: 4}]", "rollout.tasks_per_step": 3, "rollout.group_size": 3,
        "rollout.curriculum.kind": "pass_rate", "rollout.curriculum.decay": 0.8, "trainer.steps": 4,
        "trainer.save_every": 2, "trainer.eval_tasks": 0, "algorithm.rounds_ctrl.rounds": 1, **overrides})


def _steps(run_dir):
    """Per step: its metrics line and its trajectories' (task, category, sample, token ids)."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [x for x in lines if x["kind"] == "train"]
    sampled = [[(t["task_id"], t["category"], t["sample_index"], t["token_ids"]) for t in map(json.loads, (
        run_dir / "trajectories" / f"step_{x['step']:06d}.jsonl").read_text().splitlines())] for x in trained]
    return trained, sampled


def test_a_run_with_the_curriculum_logs_it_checkpoints_its_counts_and_resumes_to_the_same_tasks(
        tmp_path, levels_pm, tiny_config):
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model
    from agentgym_core.training.checkpoint import load_trainer_state

    model, tokenizer = tiny_chat_model(seed=0)
    train(_levels_config(tiny_config, tmp_path / "full"), plugin_manager=levels_pm, model=model, tokenizer=tokenizer)
    full, full_tasks = _steps(tmp_path / "full")
    assert [x["step"] for x in full] == [1, 2, 3, 4]
    # Four categories (three levels and the uncategorised tasks), none tried before step 1: 1 - 2 / 2^3 each.
    assert full[0]["curriculum/levels/expected_mixed"] == pytest.approx(0.75)
    assert full[0]["curriculum/levels/categories_weighted"] == 4.0
    assert full[3]["curriculum/levels/expected_mixed"] != pytest.approx(0.75)  # the counts moved the weights
    assert {category for step in full_tasks for _, category, _, _ in step} <= {"easy", "coin", "hard", None}
    state = load_trainer_state(tmp_path / "full" / "checkpoints" / "step_000004")
    attempts = sum(a for _, _, _, a in state["curriculum"]["counts"])
    assert attempts == pytest.approx(sum(0.8**k * 9 for k in range(4)))  # 9 samples a step, decayed each step

    model, tokenizer = tiny_chat_model(seed=0)
    config = _levels_config(tiny_config, tmp_path / "cut")
    train(config, plugin_manager=levels_pm, model=model, tokenizer=tokenizer, stop_after=2)
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, resume=True, plugin_manager=levels_pm, model=model, tokenizer=tokenizer)
    resumed, resumed_tasks = _steps(tmp_path / "cut")
    assert [x["step"] for x in resumed] == [1, 2, 3, 4]
    assert resumed_tasks == full_tasks  # the same tasks, samples and tokens, before and after the resume
    # expected_mixed is what shows the counts came back: a resume that lost them draws step 3 from unseen
    # categories (0.75), even where those weights happen to pick the same tasks.
    for a, b in zip(resumed, full, strict=True):
        for key in ("curriculum/levels/expected_mixed", "curriculum/levels/categories_weighted", "success",
                    "pg_loss"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["step"], key)
