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

    code = re.search(r"```python\n(.*?)```", writing_plugins(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    estimate = namespace["baseline_estimator"]
    assert estimate.options_model().baseline == 0.5
    check_estimator(estimate)
