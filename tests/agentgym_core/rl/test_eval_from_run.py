"""One evaluation: `agentgym eval --from RUN_DIR` plays what the trainer's final evaluation played, under the
same conditions, and gets the same numbers from the same checkpoint."""

from __future__ import annotations

import json

import pytest

from agentgym_core.cli import main
from agentgym_core.plugins import reset_plugin_manager
from agentgym_core.rl.trainer import train
from agentgym_core.testing.tiny_model import tiny_chat_model


@pytest.fixture
def trained(tmp_path_factory, pm, tiny_config):
    """A finished 1-step run on WordEnv whose final evaluation plays 3 held-out tasks, greedy."""
    run_dir = tmp_path_factory.mktemp("from") / "run"
    config = tiny_config(run_dir, **{"trainer.steps": 1, "trainer.eval_tasks": 3, "trainer.eval_before": "false",
                                     "rollout.max_new_tokens": 8})
    model, tokenizer = tiny_chat_model(seed=0)
    results = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    reset_plugin_manager(pm)  # the command finds the word env and the backend where the run found them
    yield run_dir, results["eval_after"]
    reset_plugin_manager(None)


def test_eval_from_a_run_gives_the_trainers_numbers_on_its_checkpoint(trained, tmp_path, capsys):
    run_dir, after = trained
    out = tmp_path / "eval"
    assert main(["eval", "--from", str(run_dir), "--out", str(out), "--threads", "1"]) in (0, 1)
    capsys.readouterr()
    results = json.loads((out / "results.json").read_text())
    assert results["panel_hash"] == after["panel_hash"]  # the same tasks under the same conditions
    panel = json.loads((run_dir / "evaluation_panel.json").read_text())
    assert json.loads((out / "evaluation_panel.json").read_text()) == panel
    assert {f"{r['env']}:{r['task_id']}": int(r["success"]) for r in results["per_task"]} == after["per_task"]
    overall = results["overall"]
    assert overall["samples"] == after["tasks"] == 3
    assert overall["score_avg"] == pytest.approx(after["reward"], abs=1e-9)  # rewards depend on every sampled token
    assert overall["turns_avg"] == pytest.approx(after["turns"], abs=1e-9)
    assert overall["success_avg"] == pytest.approx(after["success"], abs=1e-9)


def test_a_sampling_setting_typed_beside_from_changes_the_panel_hash(trained, tmp_path, capsys):
    run_dir, after = trained
    out = tmp_path / "eval"
    main(["eval", "--from", str(run_dir), "--out", str(out), "--max-new-tokens", "7", "--threads", "1"])
    capsys.readouterr()
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["max_new_tokens"] == 7 and results["config"]["limit"] == 3  # the rest is the run's
    assert results["panel_hash"] != after["panel_hash"]


def test_eval_from_a_run_with_k_samples_a_task_plays_them_too(pm, tiny_config, tmp_path, capsys):
    run_dir = tmp_path / "run"
    config = tiny_config(run_dir, **{"trainer.steps": 1, "trainer.eval_tasks": 2, "trainer.eval_before": "false",
                                     "trainer.eval_samples": 2, "rollout.eval_temperature": 1.0,
                                     "rollout.max_new_tokens": 8})
    model, tokenizer = tiny_chat_model(seed=0)
    after = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)["eval_after"]
    reset_plugin_manager(pm)
    try:
        main(["eval", "--from", str(run_dir), "--out", str(tmp_path / "eval"), "--threads", "1"])
    finally:
        reset_plugin_manager(None)
    capsys.readouterr()
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["config"]["n_samples"] == 2 and results["panel_hash"] == after["panel_hash"]
    rates: dict[str, list[int]] = {}
    for row in results["per_task"]:
        rates.setdefault(f"{row['env']}:{row['task_id']}", []).append(int(row["success"]))
    assert {task: sum(s) / len(s) for task, s in rates.items()} == after["per_task"]


def test_from_a_run_without_a_checkpoint_is_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("envs: [{name: word}, {name: guess}]\n")
    assert main(["eval", "--from", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no complete checkpoint" in err


class _Captured(Exception):
    """Stops `agentgym eval` at the evaluation, with the settings it was given."""


def _settings_of(argv, monkeypatch):
    import agentgym_core.evaluation as evaluation

    def capture(config, **_):
        raise _Captured(config)

    monkeypatch.setattr(evaluation, "evaluate", capture)
    with pytest.raises(_Captured) as stopped:
        main(argv)
    return stopped.value.args[0]


def test_eval_from_a_tool_call_recipe_plays_through_the_act_tool(pm, tmp_path, monkeypatch, capsys):
    """A run whose env entry says `action_format: tool_call` is evaluated with tool calls by `--from`, and a
    plain `agentgym eval --env` can ask for them with `--action-format`."""
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.evaluation import evaluate

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("envs: [{name: word, action_format: tool_call}]\ntrainer: {eval_tasks: 2}\n")
    reset_plugin_manager(pm)
    try:
        config = _settings_of(["eval", "--from", str(recipe)], monkeypatch)
        assert config.action_format == "tool_call"
        assert _settings_of(["eval", "--env", "word"], monkeypatch).action_format == "text"
        assert _settings_of(["eval", "--env", "word", "--action-format", "tool_call"],
                            monkeypatch).action_format == "tool_call"
        with pytest.raises(SystemExit):
            main(["eval", "--env", "word", "--action-format", "json"])
        assert "invalid choice" in capsys.readouterr().err
        monkeypatch.undo()

        out = tmp_path / "eval"
        config = config.model_copy(update={"out_dir": str(out), "max_rounds": 2, "max_new_tokens": 8})
        evaluate(config, backend=TransformersBackend(*tiny_chat_model(seed=0)), progress=False)
    finally:
        reset_plugin_manager(None)
    saved = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(saved) == 2 and all("<tools>" in record["messages"][0]["content"] for record in saved)
    # a random model writes no readable call: each turn is refused before it reaches the environment
    turns = [turn for record in saved for turn in record["turns"]]
    assert turns and all(turn["observation"].startswith("Invalid tool call: no <tool_call>") for turn in turns)
