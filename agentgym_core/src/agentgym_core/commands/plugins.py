"""`agentgym plugins`: every plugin with what it provides, its package, version and status."""

from __future__ import annotations

import argparse

from agentgym_core.commands._table import format_table
from agentgym_core.plugins import get_plugin_manager


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plugins", help="list installed plugins and what they provide",
        description="List every plugin (builtin and from the 'agentgym' entry-point group): name, what it "
                    "registers (kind:name), package, version and status (ok, broken with the error, blocked).")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    manager = get_plugin_manager()
    provided: dict[str, list[str]] = {}
    for registration in manager.registrations():
        provided.setdefault(registration.plugin, []).append(f"{registration.kind}:{registration.name}")
    rows = [(p.name, ", ".join(provided.get(p.name, [])) or "-", p.package, p.version,
             p.status + (" (builtin)" if p.builtin else "")) for p in manager.plugins()]
    print(format_table(["plugin", "provides", "package", "version", "status"], rows))
    for plugin in manager.broken_plugins():
        print(f"\nplugin {plugin.name!r} ({plugin.package}) failed to load:\n  {plugin.error}")
    return 1 if manager.broken_plugins() else 0
