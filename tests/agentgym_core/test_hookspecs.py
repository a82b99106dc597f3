"""Meta-test: every hook is documented in its spec and in the docs' hook table (docs/concepts/plugins.md)."""

from __future__ import annotations

import inspect
from pathlib import Path

from agentgym_core import hookspecs

HOOK_TABLE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "plugins.md"


def all_hooks() -> list[str]:
    return [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("agentgym_")]


def test_every_hook_is_named_by_convention_and_documented():
    hooks = all_hooks()
    assert set(hookspecs.CATALOG_HOOKS.values()) | set(hookspecs.OBSERVER_HOOKS) == set(hooks)
    for name in hooks:
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert len(doc) > 40, f"{name} needs a docstring saying its arguments and return"


def test_every_hook_is_in_the_docs_hook_table():
    text = HOOK_TABLE.read_text()
    missing = [name for name in all_hooks() if f"| `{name}" not in text]
    assert not missing, f"{HOOK_TABLE}'s hook table lacks {missing}"
