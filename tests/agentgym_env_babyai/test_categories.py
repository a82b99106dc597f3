"""``envs[i].categories`` on BabyAI's real catalog: training, the warm start's expert, and every evaluation of
a run draw only the chosen levels, and a misspelt level fails in seconds with the fix."""

from __future__ import annotations

import json

import pytest

from agentgym_core.cli import main
from agentgym_core.evaluation.panel import held_out_order, panel_tasks
from agentgym_core.plugins import PluginManager, get_plugin_manager, reset_plugin_manager
from agentgym_core.rl.config import load_config
from agentgym_core.rl.envs import open_envs
from agentgym_core.rl.eval_from_run import eval_config_from_run
from agentgym_env_babyai import TEST_IDS, TRAIN_IDS, BabyAIEnv, task_level_seed

LEVELS = ["GoToRedBall", "Open", "PickupLoc"]


@pytest.fixture(autouse=True)
def _babyai_installed():
    """The suite turns entry-point discovery off; these tests find BabyAI (and the estimators) as a user would."""
    reset_plugin_manager(PluginManager(autoload=True, allow=["babyai", "estimators", "transformers"]))
    yield
    reset_plugin_manager(None)


def _level(task_id: int) -> str:
    return task_level_seed(task_id)[0].removeprefix("BabyAI-").rsplit("-v", 1)[0]


def test_a_run_trains_and_evaluates_on_its_categories_only():
    config = load_config(None, [f"envs=[{{name: babyai, categories: [{', '.join(LEVELS)}]}}]"])
    with open_envs(get_plugin_manager(), config.envs) as (env,):
        assert {_level(t) for t in env.train_tasks} == set(LEVELS)
        assert len(env.train_tasks) == sum(1 for t in TRAIN_IDS if _level(t) in LEVELS)
        assert {_level(t) for t in env.test_tasks} == set(LEVELS)
        # The held-out order is the split's round-robin over levels, restricted: a panel of 3 has one of each.
        assert env.test_tasks == held_out_order(BabyAIEnv.tasks(), "test", LEVELS)
        assert sorted(_level(t) for t in panel_tasks(env.test_tasks, 3)) == sorted(LEVELS)
        assert set(env.test_tasks) <= set(TEST_IDS)


def test_agentgym_eval_from_the_recipe_plays_the_same_panel(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model: {{path: smollm2-135m-instruct}}\nenvs: [{{name: babyai, categories: {LEVELS}}}]\n"
                      "trainer: {eval_tasks: 5}\n")
    eval_config = eval_config_from_run(recipe)
    assert eval_config.categories == LEVELS and eval_config.limit == 5
    with open_envs(get_plugin_manager(), load_config(recipe).envs) as (env,):
        trainer_panel = panel_tasks(env.test_tasks, 5)
    assert panel_tasks(held_out_order(BabyAIEnv.tasks(), eval_config.split, eval_config.categories),
                       eval_config.limit) == trainer_panel


def test_a_misspelt_category_fails_before_any_model_loads(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model: {path: smollm2-135m-instruct}\nenvs: [{name: babyai, categories: [GoToRedBal]}]\n"
                      f"trainer: {{run_dir: {tmp_path / 'run'}}}\n")
    assert main(["train", str(recipe)]) == 2  # from the recipe check, which runs before the model loads
    err = capsys.readouterr().err
    assert "envs[0].categories: unknown category 'GoToRedBal' (did you mean 'GoToRedBall'?)" in err
    assert not (tmp_path / "run").exists()


def test_collect_plays_only_the_chosen_levels(tmp_path, capsys):
    out = tmp_path / "demos.jsonl"
    assert main(["collect", "--env", "babyai", "--category", "GoToRedBall", "--category", "Open", "--n", "4",
                 "--shuffle", "--max-turns", "12", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and {r["category"] for r in rows} <= {"GoToRedBall", "Open"}
    assert all(r["task_id"] in set(TRAIN_IDS) for r in rows)
    capsys.readouterr()
    assert main(["collect", "--env", "babyai", "--category", "Opn", "--n", "1", "--out", str(tmp_path / "x")]) == 2
    assert "did you mean 'Open'?" in capsys.readouterr().err




def test_task_lists_outside_the_categories_are_refused():
    from agentgym_core.env import InvalidTaskError

    config = load_config(None, ["envs=[{name: babyai, categories: [Open], train_tasks: [0, 1]}]"])
    with (pytest.raises(InvalidTaskError, match="none of the 2 babyai training tasks is in categories Open"),
          open_envs(get_plugin_manager(), config.envs)):
        pass
