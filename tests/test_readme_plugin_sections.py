"""The README's "Writing plugins" has a section per extension point, naming every hook, and its code runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentgym_core import hookspecs

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["Environment", "Expert", "Advantage estimator", "Round scheduler", "Rollout backend", "Observer"]


def writing_plugins() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^## Writing plugins\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "README.md has no '## Writing plugins' section"
    return match.group(1)


def test_one_section_per_extension_point_naming_its_hooks():
    text = writing_plugins()
    assert re.findall(r"^### (.+)$", text, re.M) == SECTIONS
    for hook in [*hookspecs.CATALOG_HOOKS.values(), *hookspecs.OBSERVER_HOOKS]:
        assert hook in text, f"the README's plugin sections do not mention {hook}"


def test_every_path_the_sections_cite_exists():
    cited = set(re.findall(r"`((?:examples|plugins|agentgym_core|tests)/[\w./-]+)`", writing_plugins()))
    assert cited
    for path in cited:
        assert (ROOT / path).exists(), path


def test_the_estimator_example_runs_with_its_options():
    pytest.importorskip("torch")
    from agentgym_core.rl import check_estimator

    blocks = re.findall(r"```python\n(.*?)```", writing_plugins(), re.S)
    code = next(b for b in blocks if "baseline_estimator" in b)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    estimate = namespace["baseline_estimator"]
    assert estimate.options_model().baseline == 0.5
    check_estimator(estimate)


def test_the_expert_example_registers_a_player_that_solves_guess():
    """The README's expert snippet, run as written, registers an expert that wins a guess task."""
    pytest.importorskip("agentgym_env_guess")
    from agentgym_core.experts import ExpertSpec
    from agentgym_core.finetune.experts import play_expert
    from agentgym_env_guess.env import GuessEnv

    blocks = re.findall(r"```python\n(.*?)```", writing_plugins(), re.S)
    code = next(b for b in blocks if "agentgym_register_experts" in b)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    registered = {}
    namespace["agentgym_register_experts"](lambda name, obj, summary="": registered.setdefault(name, obj))
    assert isinstance(registered["guess"], ExpertSpec)
    recording, error = play_expert(registered["guess"], GuessEnv(), 3)
    assert error is None and recording.steps[-1][1].success
