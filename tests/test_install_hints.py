"""Install advice is right: each `pip install` the docs or an error prints works from the checkout.

Every test makes a fresh virtual environment and runs the install commands exactly as they are
written, then the command they were for. To stay offline and fast, the fresh venv sees the
third-party packages of the dev venv (torch, transformers, minigrid, ...) through a ``.pth`` file
pointing at a folder of links to them, with every agentgym distribution left out; pip runs with
``PIP_NO_INDEX=1`` and without build isolation (the linked setuptools builds the packages). So an
agentgym package that a command does not install is missing, as on a user's machine; a third-party
dependency missing from a pyproject would not be caught here (tests/test_fresh_install.py installs
from the index and catches that).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("pip_installs")  # pip builds agentgym_core in its tree: one build at a time

ROOT = Path(__file__).resolve().parents[1]
PIP_SHIM = '#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n'


@pytest.fixture(scope="module")
def third_party(tmp_path_factory) -> Path:
    """A folder of links to the dev venv's site-packages entries, agentgym's own distributions left out."""
    folder = tmp_path_factory.mktemp("third_party")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name
        if name.startswith(("agentgym", "__editable__", "_agentgym")) or name.endswith(".pth") \
                or name == "__pycache__":
            continue
        (folder / name).symlink_to(entry)
    return folder


@pytest.fixture
def venv(tmp_path, third_party) -> Path:
    """A fresh venv with no agentgym package; `pip` in its bin folder."""
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    purelib = subprocess.run([str(path / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "_third_party.pth").write_text(f"{third_party}\n")
    pip = path / "bin" / "pip"
    pip.write_text(PIP_SHIM)
    pip.chmod(0o755)
    return path


def shell(venv: Path, command: str, *, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``command`` as a user would in a shell with the venv first on PATH, in the checkout's root."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AGENTGYM_", "PIP_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), PIP_NO_INDEX="1",
               PIP_NO_BUILD_ISOLATION="0", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_FIND_LINKS="")
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}"
    return result


DOCS_PAGE = ROOT / "docs" / "getting-started.md"  # where the install lines are documented


def readme_block(marker: str) -> list[str]:
    """The shell commands of docs/getting-started.md's code block after ``<!-- marker: ... -->`` (comments dropped)."""
    text = DOCS_PAGE.read_text()
    match = re.search(rf"<!-- {re.escape(marker)}:.*?-->\s*```bash\n(.*?)```", text, re.S)
    assert match, f"{DOCS_PAGE} has no block marked {marker!r}"
    lines = match.group(1).replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def hint_in(text: str) -> str:
    """The one `pip install ...` command an error or message prints (in backticks)."""
    commands = re.findall(r"`(pip install [^`]+)`", text)
    assert len(commands) == 1, f"expected one install command in: {text!r}"
    return commands[0]


def eval_command(model_dir: Path, out: Path) -> str:
    return (f"agentgym eval --env babyai --model {model_dir} --limit 1 --max-rounds 1 --max-new-tokens 4 "
            f"--num-envs 1 --threads 1 --out {out}")


def train_recipe(model_dir: Path, path: Path) -> Path:
    path.write_text(textwrap.dedent(f"""\
        model: {{path: {model_dir}}}
        runtime: {{threads: 1}}
        envs: [{{name: babyai}}]
        rollout: {{tasks_per_step: 1, group_size: 2, max_new_tokens: 4}}
        algorithm: {{rounds_ctrl: {{rounds: 1}}, kl: {{coef: 0.0}}}}
        trainer: {{steps: 1, eval_tasks: 0, run_dir: {path.parent / 'run'}, progress: false, tensorboard: false}}
    """))
    return path


@pytest.mark.slow
def test_readme_install_lines_give_a_working_eval_and_train(venv, tiny_model_dir, tmp_path):
    commands = readme_block("install-only-what-you-need")
    assert [c.split()[:2] for c in commands] == [["pip", "install"]] * len(commands)
    ok(shell(venv, commands[0]))
    envs = ok(shell(venv, "agentgym envs")).stdout
    assert "babyai" in envs
    for command in commands[1:]:
        ok(shell(venv, command))
    assert "ALL" in ok(shell(venv, eval_command(tiny_model_dir, tmp_path / "eval"))).stdout
    recipe = train_recipe(tiny_model_dir, tmp_path / "recipe.yaml")
    ok(shell(venv, f"agentgym train {recipe}"))
    assert (tmp_path / "run" / "metrics.jsonl").is_file()


@pytest.mark.slow
def test_readme_suite_install_gives_the_suite_and_its_extra(venv):
    for command in readme_block("install-the-suite"):
        ok(shell(venv, command))
    listed = ok(shell(venv, "pip list --format=freeze")).stdout
    assert "agentgym-suite==" in listed and "agentgym-env-textcraft==" in listed
    assert "textcraft" in ok(shell(venv, "agentgym envs")).stdout


@pytest.mark.slow
def test_each_missing_package_error_prints_the_install_that_fixes_it(venv, tiny_model_dir, tmp_path):
    ok(shell(venv, f"pip install -e {shlex.quote(str(ROOT / 'agentgym_core'))}"))

    # No environment yet: `agentgym envs` says how to install one; after that it is listed.
    ok(shell(venv, hint_in(ok(shell(venv, "agentgym envs", cwd=tmp_path)).stdout), cwd=tmp_path))
    assert "babyai" in ok(shell(venv, "agentgym envs", cwd=tmp_path)).stdout

    # eval without a rollout backend: one line naming the install; then eval works.
    command = eval_command(tiny_model_dir, tmp_path / "eval")
    failed = shell(venv, command, cwd=tmp_path)
    assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert "agentgym-backend-transformers" in failed.stderr
    ok(shell(venv, hint_in(failed.stderr), cwd=tmp_path))
    ok(shell(venv, command, cwd=tmp_path))

    # train without the estimators plugin: the same, for `algorithm.estimator: grpo`.
    command = f"agentgym train {train_recipe(tiny_model_dir, tmp_path / 'recipe.yaml')}"
    failed = shell(venv, command, cwd=tmp_path)
    assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert "agentgym-estimators" in failed.stderr
    ok(shell(venv, hint_in(failed.stderr), cwd=tmp_path))
    ok(shell(venv, command, cwd=tmp_path))
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
