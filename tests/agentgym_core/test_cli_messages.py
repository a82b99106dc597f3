"""Messages a new user meets on the command line: each one line that says what is wrong and the fix.

Each case runs the real ``agentgym`` command as a user would (a subprocess where the process's exit
or output matters, ``agentgym_core.cli.main`` in-process otherwise) with the installed ``guess``
example env.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym_core.cli import build_parser, main, subcommand_parsers
from agentgym_core.plugins import PluginManager, reset_plugin_manager

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def plugins():
    """The guess env (examples/agentgym_env_guess) with the estimators and the transformers backend, loaded by
    entry point as a user has them (a recipe is checked against its backend's declared options)."""
    pytest.importorskip("agentgym_env_guess")
    reset_plugin_manager(PluginManager(autoload=True, allow=["guess", "estimators", "transformers"]))
    yield
    reset_plugin_manager(None)


def agentgym(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``agentgym ARGS`` in a fresh process, with plugins loaded from entry points as for a user."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGYM_")}
    return subprocess.run(
        [sys.executable, "-m", "agentgym_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentgym: error: "), result.stderr
    return lines[0]


def in_process_one_line(capsys, argv: list[str]) -> str:
    """``agentgym ARGV`` in this process: rc 2, one line on stderr, and nothing printed as started."""
    code = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, (code, captured.out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "serving" not in captured.out
    return err


def test_serve_and_serve_model_on_a_port_in_use_say_so_before_serving(capsys):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        line = in_process_one_line(capsys, ["serve", "guess", "--port", str(port)])
        assert f"port {port} on 127.0.0.1 is already in use" in line and "--port" in line
        # With several workers too (they bind the port themselves, with SO_REUSEPORT).
        assert "already in use" in in_process_one_line(
            capsys, ["serve", "guess", "--port", str(port), "--workers", "2"]
        )
        # serve-model binds before the weights load: a taken port fails now, not after minutes of loading
        line = in_process_one_line(capsys, ["serve-model", "no-such-model", "--port", str(port)])
        assert f"cannot listen on 127.0.0.1:{port}" in line and "--port (0 picks a free one)" in line


@pytest.mark.slow  # a real `agentgym serve` process: on today's code it would serve until the timeout
def test_serve_checks_env_kwargs_against_the_constructor_before_starting():
    result = agentgym("serve", "guess", "--port", "0", "--env-kwargs", '{"hihg": 50}', timeout=60)
    line = one_line(result)
    assert "--env-kwargs: environment 'guess' takes no option 'hihg'. Did you mean 'high'?" in line
    assert "Its options: low, high." in line
    assert "serving" not in result.stdout


def test_print_config_fails_on_an_env_name_typo_as_a_run_would(capsys, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"model: {{path: no-such-model}}\nenvs: [{{name: guess}}]\ntrainer: {{run_dir: {tmp_path}/run}}\n"
    )
    err = in_process_one_line(capsys, ["train", str(recipe), "envs.0.name=gess", "--print-config"])
    assert "'gess'" in err and "Did you mean 'guess'" in err
    err = in_process_one_line(capsys, ["train", str(recipe), "envs.0.env_kwargs={hihg: 5}", "--print-config"])
    assert "takes no option 'hihg'" in err
    assert main(["train", str(recipe), "--print-config"]) == 0  # the right name still prints
    assert "name: guess" in capsys.readouterr().out


def test_bare_train_asks_for_a_recipe(capsys):
    for command in ("train", "finetune"):
        err = in_process_one_line(capsys, [command])
        assert "no recipe given: pass a YAML recipe" in err and "--resume RUN_DIR" in err
        assert "Field required" not in err


def test_no_help_entry_of_any_subcommand_states_its_default_twice():
    entries = 0
    for name, parser in subcommand_parsers(build_parser()).items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.help:
                continue
            entries += 1
            text = formatter._expand_help(action)
            assert len(re.findall(r"\(default\b", text)) <= 1, f"agentgym {name} --help: {text}"
            assert "(default: None)" not in text, f"agentgym {name} --help: {text}"
    assert entries > 60  # every subcommand was scanned
    help_text = " ".join(subprocess_free_help("eval").split())
    assert "(default: $OPENAI_API_KEY)" in help_text and "(default: smollm2-135m-instruct)" in help_text


def subprocess_free_help(command: str) -> str:
    """``agentgym COMMAND --help`` as printed (argparse exits after printing it)."""
    parser = subcommand_parsers(build_parser())[command]
    return parser.format_help()


@pytest.mark.slow  # a real `agentgym serve` process
def test_serve_on_port_0_prints_the_free_port_it_listens_on():
    from agentgym_core.testing import start_server_process

    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGYM_")}
    server, url = start_server_process([sys.executable, "-m", "agentgym_core.cli", "serve", "guess", "--port", "0"],
                                       env=env)
    try:
        port = int(url.rsplit(":", 1)[1])
        assert url == f"http://127.0.0.1:{port}" and port > 0
        with socket.socket() as other, pytest.raises(OSError):  # the server holds it
            other.bind(("127.0.0.1", port))
    finally:
        server.terminate()
        server.wait(timeout=30)
    with pytest.raises(RuntimeError, match=r"exited with code 2: .*takes no option 'hihg'"):
        start_server_process([sys.executable, "-m", "agentgym_core.cli", "serve", "guess", "--port", "0",
                              "--env-kwargs", '{"hihg": 50}'], env=env)
