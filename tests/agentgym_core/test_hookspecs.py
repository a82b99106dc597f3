"""Meta-test: every hook is documented in its spec and in the README's hook reference."""

from __future__ import annotations

import inspect
from pathlib import Path

from agentgym_core import hookspecs

README = Path(__file__).resolve().parents[2] / "README.md"


def all_hooks() -> list[str]:
    return [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("agentgym_")]


def test_every_hook_is_named_by_convention_and_documented():
    hooks = all_hooks()
    assert set(hookspecs.CATALOG_HOOKS.values()) | set(hookspecs.OBSERVER_HOOKS) == set(hooks)
    for name in hooks:
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert len(doc) > 40, f"{name} needs a docstring saying its arguments and return"


def test_every_hook_is_in_the_readme_reference():
    text = README.read_text()
    missing = [name for name in all_hooks() if f"`{name}" not in text]
    assert not missing, f"README.md's hook reference lacks {missing}"
