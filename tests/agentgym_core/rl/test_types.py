"""The type checker holds ``rl/`` to its annotations, and each launcher's roles to the Protocols of
``rl/roles.py``: the calls the training loop makes are the calls the roles declare.

Runs ``mypy`` as ``[tool.mypy]`` in the root pyproject.toml configures it (strict on ``rl/``);
``scripts/install.sh --dev`` installs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="the dev extra installs mypy: scripts/install.sh --dev")

ROOT = Path(__file__).resolve().parents[3]


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_rl_passes_the_type_checker():
    found = _mypy()
    assert found.returncode == 0, f"mypy on rl/ (fix the code, or the Protocol the loop calls):\n{found.stdout}"


def test_the_checker_refuses_a_learner_without_a_call_the_loop_makes(tmp_path):
    """A learner whose ``rollout_weights`` takes no dtype (the loop passes the rollout engine's) is no
    LearnerRole, and a placement handing it to the loop fails the check."""
    placement = tmp_path / "old_learner.py"
    placement.write_text('''
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from agentgym_core.rl.roles import LearnerRole


class OldLearner:
    lr = 0.0
    weight_sync_bytes = None

    def score(self, batch: Any, *, temperature: float) -> Any: ...
    def update(self, inputs: Any, *, temperature: float, generator: Any) -> dict[str, float]: ...
    def step_schedule(self) -> None: ...
    def rollout_weights(self) -> Any: ...
    def save(self, run_dir: Path, step: int, *, tokenizer: Any, extra_state: dict[str, Any], keep: int,
             hf_weights: bool = True) -> None: ...
    def load(self, checkpoint: Path) -> dict[str, Any]: ...


def place(stack: contextlib.ExitStack) -> LearnerRole:
    return OldLearner()
''')
    found = _mypy(str(placement))
    assert found.returncode == 1, found.stdout
    assert 'Incompatible return value type (got "OldLearner", expected "LearnerRole")' in found.stdout, found.stdout
    assert "rollout_weights" in found.stdout, found.stdout  # the note names the call that does not match
