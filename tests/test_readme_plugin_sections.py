"""The docs have a how-to page per extension point, naming every hook, and their code runs.

(The pages were the README's "Writing plugins" sections; the README now links to them.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentgym_core import hookspecs

ROOT = Path(__file__).resolve().parents[1]
HOW_TO = ROOT / "docs" / "how-to"
# One page per extension point, in the order of the docs' navigation.
PAGES = {
    "your-own-env.md": "Your own environment",
    "expert.md": "An expert policy",
    "estimator.md": "An advantage estimator",
    "scheduler.md": "A round scheduler",
    "backend.md": "A rollout backend",
    "observer.md": "An observer",
}


def writing_plugins() -> str:
    """The extension-point pages, one after another."""
    texts = []
    for name, title in PAGES.items():
        text = (HOW_TO / name).read_text()
        assert text.startswith(f"# {title}\n"), f"docs/how-to/{name} should start with '# {title}'"
        texts.append(text)
    return "\n".join(texts)


def test_one_page_per_extension_point_naming_its_hooks():
    text = writing_plugins()
    for hook in [*hookspecs.CATALOG_HOOKS.values(), *hookspecs.OBSERVER_HOOKS]:
        assert hook in text, f"the docs' plugin pages do not mention {hook}"
    nav = (ROOT / "mkdocs.yml").read_text()
    for name in PAGES:
        assert f"how-to/{name}" in nav, f"mkdocs.yml's nav lacks how-to/{name}"


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
    exec(compile(code, "docs/how-to/estimator.md", "exec"), namespace)
    from types import SimpleNamespace

    from agentgym_core.plugins import PluginManager

    manager = PluginManager(autoload=False)
    hook = namespace["agentgym_register_advantage_estimators"]
    manager.register(SimpleNamespace(agentgym_register_advantage_estimators=hook), "docs-example")
    registered = manager.registration("advantage_estimator", "baseline")
    options = registered.declared("options")
    assert registered.obj is namespace["baseline_estimator"] and options().baseline == 0.5
    check_estimator(registered.obj, options())


def test_the_expert_example_registers_a_player_that_solves_guess():
    """The docs' expert snippet, run as written, registers an expert that wins a guess task."""
    pytest.importorskip("agentgym_env_guess")
    from agentgym_core.experts import ExpertSpec
    from agentgym_core.finetune.experts import play_expert
    from agentgym_env_guess.env import GuessEnv

    blocks = re.findall(r"```python\n(.*?)```", writing_plugins(), re.S)
    code = next(b for b in blocks if "agentgym_register_experts" in b)
    namespace: dict = {}
    exec(compile(code, "docs/how-to/expert.md", "exec"), namespace)
    registered = {}
    namespace["agentgym_register_experts"](lambda name, obj, summary="": registered.setdefault(name, obj))
    assert isinstance(registered["guess"], ExpertSpec)
    recording, error = play_expert(registered["guess"], GuessEnv(), 3)
    assert error is None and recording.steps[-1][1].success
