"""Acceptance: a fresh venv installs the core, BabyAI and a third-party env, and they work.

Everything runs in a new virtual environment made by the test (no packages from the dev venv),
with the servers and clients as separate processes talking over loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentgym_core.testing import start_server_process

pytestmark = pytest.mark.xdist_group("pip_installs")  # pip builds agentgym_core in its tree: one build at a time

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    pip = [str(path / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    subprocess.run([*pip, str(ROOT / "agentgym_core"), str(ROOT / "agentgym_env_babyai"),
                    str(ROOT / "examples" / "agentgym_env_guess")], check=True, timeout=900)
    return path


def run(venv: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGYM_")}
    return subprocess.run(args, cwd=venv.parent, env=env, capture_output=True, text=True, timeout=300, **kwargs)


@pytest.mark.slow
def test_envs_lists_babyai_and_the_third_party_env(venv):
    result = run(venv, str(venv / "bin" / "agentgym"), "envs")
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[2:] if line.strip()}
    assert "babyai" in lines and "test=" in lines["babyai"]
    assert lines["guess"].split()[1:3] == ["train=900,", "test=100"]


@pytest.mark.slow
def test_third_party_env_passes_check_env_over_http(venv):
    script = "from agentgym_core.testing import check_env_http; from agentgym_env_guess import GuessEnv; " \
             "print(len(check_env_http(GuessEnv).episodes))"
    result = run(venv, str(venv / "bin" / "python"), "-c", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"


@pytest.mark.slow
def test_serve_babyai_then_play_through_client_and_agentgym_routes(venv):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGYM_")}
    # --port 0: the server binds a free port itself and prints it (a port picked here could be taken before)
    server, url = start_server_process([str(venv / "bin" / "agentgym"), "serve", "babyai", "--port", "0"], env=env)
    try:
        client_script = textwrap.dedent(f"""
            import json, time, requests
            from agentgym_core.http.client import HTTPEnv
            from agentgym_env_babyai.expert import solve
            url = "{url}"
            for _ in range(300):
                try:
                    requests.get(url + "/v1/health", timeout=1); break
                except requests.ConnectionError:
                    time.sleep(0.1)
            env = HTTPEnv(url, env="babyai")
            task = env.tasks().split("test")[0]
            outcome = solve(env, task)
            env.close()
            created = requests.post(url + "/create", timeout=10).json()
            reset = requests.post(url + "/reset", json={{"id": created["id"], "data_idx": 1}}, timeout=10).json()
            step = requests.post(url + "/step", json={{"id": created["id"], "action": "turn left"}}, timeout=10).json()
            print(json.dumps({{"success": outcome.success, "reward": outcome.reward,
                              "reset": sorted(reset), "step": sorted(step),
                              "goal": reset["observation"].startswith("Your goal:")}}))
        """)
        result = run(venv, str(venv / "bin" / "python"), "-c", client_script)
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        assert answer["success"] is True and answer["reward"] > 0
        assert answer["goal"] is True
        assert {"observation", "reward", "done"} <= set(answer["step"])
    finally:
        server.terminate()
        server.wait(timeout=30)
