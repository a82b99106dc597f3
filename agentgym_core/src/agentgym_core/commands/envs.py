"""`agentgym envs`: installed environments with their split sizes."""

from __future__ import annotations

import argparse
import sys

from agentgym_core.commands._table import format_table
from agentgym_core.plugins import KNOWN_PROVIDERS, get_plugin_manager, install_hint

INSTALL_NOTES = {
    "gem": "in a virtual environment without agentgym-env-reasoning-gym (GEM pins reasoning-gym==0.1.23)",
}
"""Environment name -> what its install line must add (a dependency clash, say)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "envs", help="list installed environments and their task splits",
        description="List every registered environment with its package, task split sizes and categories.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    manager = get_plugin_manager()
    rows = []
    for name, registration in sorted(manager.catalog("env").items()):
        try:
            catalog = registration.obj.tasks()
            splits = ", ".join(f"{split}={size}" for split, size in catalog.sizes().items())
            categories = str(len(catalog.categories))
        except Exception as exc:  # one broken env must not hide the others
            splits, categories = f"error: {exc}", "?"
        rows.append((name, splits, categories, registration.package, registration.summary))
    if not rows:
        print(f"No environments installed. Install one, e.g. BabyAI: {install_hint('agentgym_env_babyai')}")
    else:
        print(format_table(["env", "splits", "categories", "package", "summary"], rows))
    broken = manager.broken_plugins()
    missing = sorted(name for (kind, name) in KNOWN_PROVIDERS if kind == "env" and name not in manager.catalog("env")
                     and name not in {p.name for p in broken})  # installed, but its plugin did not load
    if missing and rows:
        print("\nNot installed:")
        for name in missing:
            note = f" {INSTALL_NOTES[name]}" if name in INSTALL_NOTES else ""
            print(f"  {name}: {install_hint(KNOWN_PROVIDERS[('env', name)])}{note}")
    for plugin in broken:
        print(f"agentgym: error: plugin {plugin.name!r} ({plugin.package}) failed to load: {plugin.error}", file=sys.stderr)
    return 1 if broken else 0
