"""Every command of the docs' getting-started page runs, as a reader would type it.

The page's shell blocks are read from ``docs/getting-started.md``; each command must have a check
here (a new command without one fails ``test_every_command_on_the_page_is_checked``). A command
runs through the real ``agentgym`` executable of this venv, in a subprocess, with three things
swapped because they cannot exist in a test: the SmolLM2 weights (the tiny random model of
``agentgym_core.testing``), the size of a training run (one step, six expert episodes) and fixed
ports (``--port 0``: the server binds a free one and prints it). The install lines run in tests/test_install_hints.py; the two set-up commands
are what CI runs (``.ci/run``), and their training recipes run here with the tiny model.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agentgym_core.testing import start_server_process

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"
BIN = Path(sys.executable).parent
SMOKE_CHECKPOINT = "runs/babyai_smoke_cpu/checkpoints/step_000002/model"
# Make a recipe's run as small as a test allows; the recipe's own keys are otherwise as written.
SMALL_RUN = [
    "trainer.steps=1",
    "trainer.eval_tasks=1",
    "trainer.save_every=1",
    "rollout.tasks_per_step=1",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "warm_start.expert.n=6",
    "warm_start.expert.workers=1",
    "warm_start.sft.batch_size=2",
    "warm_start.data.max_tokens=null",
    "runtime.threads=1",
    "trainer.progress=false",
    "trainer.tensorboard=false",
]


def page_commands(marker: str | None = None) -> list[str]:
    """The shell commands of the page's ```bash blocks (of the one after ``<!-- marker: -->`` if given)."""
    text = PAGE.read_text()
    if marker is not None:
        match = re.search(rf"<!-- {re.escape(marker)}:.*?-->\s*```bash\n(.*?)```", text, re.S)
        assert match, f"{PAGE} has no block marked {marker!r}"
        blocks = [match.group(1)]
    else:
        blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENTGYM_")} | {"OMP_NUM_THREADS": "1"}


def agentgym(args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    """``agentgym ARGS`` (or ``.venv/bin/agentgym ARGS``) as typed, with this venv's executable."""
    args = re.sub(r"^(\.venv/bin/)?agentgym ", "", args)
    return subprocess.run(
        [str(BIN / "agentgym"), *args.split()],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
        **kwargs,
    )


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder that looks like the checkout to the commands: its examples/ and scripts/."""
    path = tmp_path_factory.mktemp("checkout")
    for name in ("examples", "scripts"):
        (path / name).symlink_to(ROOT / name)
    return path


def train_as_documented(command: str, workdir: Path, tiny_model_dir: Path) -> None:
    """The page's `agentgym train RECIPE` with the tiny model, one step: the recipe as a reader runs it."""
    recipe = re.search(r"agentgym train (\S+)", command).group(1)
    extra = command.split(recipe, 1)[1].split()
    if "--print-config" in extra:
        printed = ok(agentgym(f"train {recipe} {' '.join(extra)}", workdir)).stdout
        for override in (e for e in extra if "=" in e):
            key, value = override.split("=", 1)
            assert f"{key.rsplit('.', 1)[-1]}: {value}" in printed, f"{override} not in the printed config"
        return
    run_dir = workdir / "runs" / Path(recipe).stem
    overrides = [*SMALL_RUN, f"model.path={tiny_model_dir}", f"trainer.run_dir={run_dir}", *extra]
    printed = ok(agentgym(f"train {recipe} {' '.join(overrides)}", workdir)).stdout
    # SMALL_RUN evaluates one task, so the table is printed; the recipes' evaluations are greedy
    assert "held-out success and invalid-action rate (greedy):" in printed, printed[-2000:]
    assert (run_dir / "metrics.jsonl").is_file()
    assert any((run_dir / "checkpoints").glob("step_*/DONE"))


def serve_until_ready(args: list[str], path: str, cwd: Path) -> tuple[subprocess.Popen, str]:
    """``agentgym ARGS`` (given ``--port 0``: it binds a free port itself) once ``path`` answers; (process, base URL)."""
    server, base = start_server_process([str(BIN / "agentgym"), *args], env=env(), cwd=cwd)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + path, timeout=2):
                return server, base
        except OSError:
            if server.poll() is not None:
                raise AssertionError(f"server exited {server.returncode}") from None
            time.sleep(0.2)
    server.kill()
    raise AssertionError(f"no answer from {base + path} within 120 s")


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()


# -- the page's commands, each with the check that runs it ----------------------------------------------

SET_UP = {
    "scripts/install.sh && .venv/bin/agentgym train examples/babyai_grpo_cpu.yaml",
    "scripts/install.sh --dev && .venv/bin/python -m pytest -q",
}


def test_every_command_on_the_page_is_checked():
    checked = SET_UP | {
        ".venv/bin/agentgym train examples/babyai_smoke_cpu.yaml",
        ".venv/bin/agentgym train examples/babyai_smoke_cpu.yaml trainer.steps=1 --print-config",
        ". .venv/bin/activate",
        "agentgym plugins",
        "agentgym envs",
        "agentgym play babyai --task 3",
        "agentgym serve babyai --port 8000",
        f"agentgym eval --env babyai --model {SMOKE_CHECKPOINT} --split test --limit 4 --max-rounds 6 "
        "--max-new-tokens 48",
        ".venv/bin/agentgym view runs/babyai_smoke_cpu",
        *page_commands("install-only-what-you-need"),
        *page_commands("install-the-suite"),
    }
    unchecked = [c for c in page_commands() if c not in checked]
    assert not unchecked, f"docs/getting-started.md has commands no test runs: {unchecked}"


def test_the_set_up_commands_are_what_ci_runs():
    assert page_commands("two-commands") == sorted(SET_UP, key=lambda c: "--dev" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/install.sh --dev && .venv/bin/python -m pytest -q" in ci
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "install.sh")]).returncode == 0
    assert (BIN / "activate").is_file()  # `. .venv/bin/activate`: what install.sh made


def test_the_install_blocks_are_run_by_the_install_hints_test():
    source = (ROOT / "tests" / "test_install_hints.py").read_text()
    assert "docs/getting-started.md" in source or '"getting-started.md"' in source
    for marker in ("install-only-what-you-need", "install-the-suite"):
        assert page_commands(marker) and f'"{marker}"' in source


@pytest.mark.slow
def test_the_main_job_and_the_first_run_train_as_written(workdir, tiny_model_dir):
    main_job = next(c for c in SET_UP if "train" in c).split(" && ")[1]
    (first_run,) = page_commands("first-run")
    for command in (main_job, first_run, *page_commands("overrides")):
        train_as_documented(command, workdir, tiny_model_dir)


@pytest.mark.slow
def test_look_around_commands_run(workdir, tiny_model_dir):
    commands = page_commands("quickstart")
    assert commands[0] == ". .venv/bin/activate"
    plugins, envs, play, serve, evaluate = commands[1:]
    assert "babyai" in ok(agentgym(plugins, workdir)).stdout
    listed = ok(agentgym(envs, workdir)).stdout
    assert re.search(r"^babyai\s", listed, re.M), listed
    played = ok(agentgym(play, workdir, input="actions\nturn left\nquit\n")).stdout
    assert "=== task 3 ===" in played and "stopped." in played

    assert serve.endswith("--port 8000"), serve
    server, base = serve_until_ready(serve.split()[1:-1] + ["0"], "/v1/health", workdir)
    try:  # the page's Python snippet, against that server
        snippet = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S).group(1)
        snippet = snippet.replace("http://127.0.0.1:8000", base)
        result = subprocess.run(
            [sys.executable, "-c", snippet], env=env(), capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.strip().splitlines()) >= 2, result.stdout  # both first observations
    finally:
        stop(server)

    out = workdir / "runs" / "eval"
    evaluated = ok(
        agentgym(
            f"{evaluate.replace(SMOKE_CHECKPOINT, str(tiny_model_dir))} --threads 1 --out {out}", workdir
        )
    ).stdout
    assert "ALL" in evaluated
    results = json.loads((out / "results.json").read_text())
    assert results


@pytest.mark.slow
def test_the_viewer_serves_a_run(workdir, tiny_model_dir):
    (view,) = page_commands("viewer")
    run_dir = workdir / "runs" / "babyai_smoke_cpu"
    if not (run_dir / "metrics.jsonl").is_file():
        train_as_documented(
            ".venv/bin/agentgym train examples/babyai_smoke_cpu.yaml", workdir, tiny_model_dir
        )
    server, base = serve_until_ready(view.split()[1:] + ["--port", "0"], "/", workdir)
    try:
        with urllib.request.urlopen(f"{base}/", timeout=10) as page:
            assert page.status == 200
    finally:
        stop(server)
