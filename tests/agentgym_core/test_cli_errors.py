"""Setup errors of the `agentgym` command end as one line on stderr that says the fix, with exit code 2.

Each case runs the real command (``agentgym_core.cli.main`` in-process, and once as a subprocess)
with the mistake a user makes: a dead server URL, a broken or wrong recipe path, a typo in
``--env-kwargs`` or in a plugin name.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgym_core.cli import main
from agentgym_core.plugins import PluginManager, reset_plugin_manager

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def plugins():
    """The guess env (examples/agentgym_env_guess), the estimators and the transformers backend, loaded by entry
    point as a user has them."""
    pytest.importorskip("agentgym_env_guess")
    pytest.importorskip("agentgym_estimators")
    reset_plugin_manager(PluginManager(autoload=True, allow=["guess", "estimators", "transformers"]))
    yield
    reset_plugin_manager(None)


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A loopback URL that refuses connections: its port is bound by this test and never listened on, so no
    other process can take it while the test runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def one_line_error(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def recipe(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent(body))
    return path


GUESS_RECIPE = """\
    model: {path: no-such-model-so-nothing-may-load-it}
    envs: [{name: guess}]
    trainer: {steps: 1, run_dir: RUN}
"""


def test_eval_play_and_train_against_a_dead_server_say_to_start_it(capsys, dead_url, tmp_path):
    for argv in (["eval", "--env", "guess", "--env-url", dead_url, "--out", str(tmp_path / "eval")],
                 ["play", "guess", "--env-url", dead_url]):
        err = one_line_error(capsys, argv)
        assert f"cannot reach the environment server at {dead_url} (connection refused)" in err
        assert "agentgym serve" in err
    assert not (tmp_path / "eval").exists()
    path = recipe(tmp_path, GUESS_RECIPE.replace("RUN", str(tmp_path / "run")))
    # The model path does not exist: the server is checked before anything loads.
    err = one_line_error(capsys, ["train", str(path), f"envs.0.url={dead_url}"])
    assert "cannot reach the environment server" in err


def test_unreachable_server_from_the_shell_prints_no_traceback(dead_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGYM_")}
    result = subprocess.run([sys.executable, "-m", "agentgym_core.cli", "play", "guess", "--env-url", dead_url],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"agentgym: error: cannot reach the environment server at {dead_url} (connection refused); is `agentgym "
        "serve ENV` running there? Start it, or fix the URL (--env-url, or envs[].url in a recipe)"]


def test_broken_recipe_yaml_names_the_file_and_line(capsys, tmp_path):
    path = recipe(tmp_path, """\
        model:
          path: x
         envs: [{name: guess}]
    """)
    for command in ("train", "finetune"):
        err = one_line_error(capsys, [command, str(path)])
        assert f"{path}:3:2: not valid YAML" in err and "<unicode string>" not in err


def test_a_directory_as_recipe_says_to_pass_a_file_or_resume(capsys, tmp_path):
    err = one_line_error(capsys, ["train", str(tmp_path)])
    assert f"{tmp_path} is a directory; pass a YAML recipe file" in err
    (tmp_path / "config.yaml").write_text("envs: [{name: guess}]\n")  # a run directory
    assert f"--resume {tmp_path}" in one_line_error(capsys, ["train", str(tmp_path)])


def test_invalid_values_are_listed_on_one_line(capsys, tmp_path):
    path = recipe(tmp_path, GUESS_RECIPE.replace("RUN", str(tmp_path / "run")))
    err = one_line_error(capsys, ["train", str(path), "trainer.steps=0", "rollout.group_size=-1", "--print-config"])
    assert "trainer.steps: " in err and "rollout.group_size: " in err


def test_bad_env_kwargs_fail_before_any_episode(capsys, tmp_path):
    out = tmp_path / "eval"
    err = one_line_error(capsys, ["eval", "--env", "guess", "--env-kwargs", '{"hihg": 50}', "--out", str(out)])
    assert "--env-kwargs: environment 'guess' takes no option 'hihg'. Did you mean 'high'?" in err
    assert not out.exists()  # nothing ran
    # Values the constructor rejects are reported too, before any model loads.
    err = one_line_error(capsys, ["eval", "--env", "guess", "--env-kwargs", '{"low": 9, "high": 3}', "--out", str(out)])
    assert "low must be below high" in err
    err = one_line_error(capsys, ["eval", "--env", "guess", "--env-url", "http://127.0.0.1:1", "--env-kwargs",
                                  '{"high": 50}'])
    assert "agentgym serve ENV --env-kwargs" in err
    path = recipe(tmp_path, GUESS_RECIPE.replace("RUN", str(tmp_path / "run")))
    err = one_line_error(capsys, ["train", str(path), "envs.0.env_kwargs={hihg: 5}"])
    assert "envs[0].env_kwargs: environment 'guess' takes no option 'hihg'. Did you mean 'high'?" in err


def test_print_config_rejects_unknown_plugin_names_and_keys(capsys, tmp_path):
    path = recipe(tmp_path, GUESS_RECIPE.replace("RUN", str(tmp_path / "run")))
    err = one_line_error(capsys, ["train", str(path), "--print-config", "algorithm.estimator=grpoo"])
    assert "unknown advantage estimator 'grpoo'. Did you mean 'grpo'" in err
    err = one_line_error(capsys, ["train", str(path), "--print-config", "algorithm.rounds_ctrl.type=fixd"])
    assert "unknown round scheduler 'fixd'. Did you mean 'fixed'?" in err
    err = one_line_error(capsys, ["train", str(path), "--print-config", "algorithm.advantage.gama=0.9"])
    assert "Did you mean 'algorithm.advantage.gamma'?" in err


def test_overrides_after_print_config_apply(capsys, tmp_path):
    path = recipe(tmp_path, GUESS_RECIPE.replace("RUN", str(tmp_path / "run")))
    assert main(["train", str(path), "--print-config", "trainer.steps=7", "rollout.group_size=3"]) == 0
    printed = capsys.readouterr().out
    assert "  steps: 7\n" in printed and "  group_size: 3\n" in printed
    with pytest.raises(SystemExit) as exit_info:  # a real unknown flag is still an argparse error
        main(["train", str(path), "--print-config", "--bogus"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_env_kwargs_that_are_not_a_json_object_show_the_expected_form(capsys):
    for text, problem in (("{x", "not valid JSON"), ("[1]", "expected a JSON object")):
        with pytest.raises(SystemExit) as exit_info:
            main(["eval", "--env", "guess", "--env-kwargs", text])
        assert exit_info.value.code == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert problem in last and '{"max_turns": 20}' in last


def test_under_torchrun_another_rank_leaves_rank_0_time_to_speak_then_says_its_own_error(monkeypatch, capsys):
    from agentgym_core.commands import _report

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("RANK", "1")
    waited = []
    monkeypatch.setattr(_report.time, "sleep", waited.append)  # the wait is recorded, not slept
    _report.report_setup_error(ValueError("only rank 1 saw this"))
    assert waited == [_report.RANK_ZERO_GRACE_S]  # torchrun ends this rank during the wait once rank 0 has spoken
    assert capsys.readouterr().err == "agentgym: error: (rank 1) only rank 1 saw this\n"
    monkeypatch.setenv("RANK", "0")
    _report.report_setup_error("said at once")
    assert len(waited) == 1 and capsys.readouterr().err == "agentgym: error: said at once\n"
