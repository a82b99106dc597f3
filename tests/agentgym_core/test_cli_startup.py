"""A command line that answers at once and env servers that stay light.

Listing what is installed, asking for help and a one-line error must not import torch,
transformers or the web framework, and an env server must not load torch: each of those costs
seconds of start-up and hundreds of MB per server process. These tests read what a real process
imported (``sys.modules``) or mapped (``/proc/PID/maps``), not wall-clock time, so a loaded machine
cannot make them flaky; bench/cli_startup.py measures the seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

AGENTGYM = str(Path(sys.executable).with_name("agentgym"))
ENV = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
HEAVY = ("torch", "transformers", "fastapi", "uvicorn", "minigrid", "webarena_verified")

RUN_AND_REPORT = """
import contextlib, io, json, sys
from agentgym_core.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
heavy = sys.modules["os"].environ["HEAVY_MODULES"].split(",")
print(json.dumps({"code": code, "imported": [m for m in heavy if m in sys.modules]}))
"""


def imported_by(*argv: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", RUN_AND_REPORT, *argv], capture_output=True, text=True,
                          timeout=120, env={**ENV, "HEAVY_MODULES": ",".join(HEAVY)})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], report["imported"]


@pytest.mark.parametrize("argv", [["--help"], ["plugins"], ["serve", "--help"], ["train", "--help"]])
def test_help_and_plugin_listing_import_nothing_heavy(argv):
    code, imported = imported_by(*argv)
    assert code == 0
    assert imported == [], f"`agentgym {' '.join(argv)}` imported {imported}"


@pytest.mark.parametrize("command", ["train", "finetune"])
def test_a_missing_recipe_is_reported_before_torch_is_imported(command):
    code, imported = imported_by(command, "no_such_recipe.yaml")
    assert code == 2
    assert imported == [], f"`agentgym {command} no_such_recipe.yaml` imported {imported} before saying it is missing"


def test_listing_envs_reads_split_sizes_without_torch_or_the_web_stack():
    code, imported = imported_by("envs")
    assert code == 0
    # minigrid is BabyAI's simulator, imported with its env class; the rest have no business here.
    assert [m for m in imported if m != "minigrid"] == []


def test_a_misspelt_env_is_a_one_line_error_without_torch():
    code, imported = imported_by("serve", "textcraf")
    assert code == 2
    assert "torch" not in imported and "transformers" not in imported


def test_the_recipe_schema_reads_a_recipe_without_torch():
    """rl.config is what a recipe check, --print-config and the docs' key reference import first."""
    code = ("import json, sys; from agentgym_core.rl.config import load_config; "
            "load_config('examples/babyai_grpo_cpu.yaml', ['trainer.steps=2']); "
            "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2], capture_output=True,
                          text=True, timeout=120, env=ENV)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


ROOT = Path(__file__).parents[2]


def test_print_config_reads_the_estimator_s_declarations_without_importing_it():
    code, imported = imported_by("train", str(ROOT / "examples" / "babyai_smoke_cpu.yaml"), "--print-config")
    assert code == 0
    assert "torch" not in imported and "transformers" not in imported, imported


def test_a_misspelt_env_inside_a_recipe_is_refused_before_torch(tmp_path):
    recipe = (ROOT / "examples" / "babyai_smoke_cpu.yaml").read_text()
    assert "name: babyai\n" in recipe
    (tmp_path / "typo.yaml").write_text(recipe.replace("name: babyai\n", "name: babyaai\n", 1))
    code, imported = imported_by("train", str(tmp_path / "typo.yaml"))
    assert code == 2
    assert "torch" not in imported and "transformers" not in imported, imported


def test_eval_with_a_model_path_that_does_not_exist_answers_before_transformers(tmp_path):
    code, imported = imported_by("eval", "--env", "babyai", "--model", str(tmp_path / "no_such_model"),
                                 "--out", str(tmp_path / "out"))
    assert code == 2
    assert "torch" not in imported and "transformers" not in imported, imported


@pytest.mark.parametrize("env", ["textcraft", "babyai"])
def test_an_env_server_process_never_loads_torch(env):
    from agentgym_core.testing import start_server_process

    server, url = start_server_process([AGENTGYM, "serve", env, "--port", "0"], env=ENV)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"the server exited with code {server.returncode}"
            try:
                created = requests.post(f"{url}/v1/instances", json={"task_id": 0}, timeout=30)
                break
            except (requests.ConnectionError, requests.Timeout):
                assert time.monotonic() < deadline, "the server did not answer in 120 s"
                time.sleep(0.2)
        assert created.status_code == 201, created.text  # created and reset onto task 0: the env really ran
        maps = Path(f"/proc/{server.pid}/maps").read_text()
        assert "libtorch" not in maps, f"`agentgym serve {env}` loaded torch"
    finally:
        server.terminate()
        server.wait(timeout=30)
