"""The README's environment list names every environment `agentgym envs` lists, and links its page."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from agentgym_core.commands import envs
from agentgym_core.plugins import KNOWN_PROVIDERS, PluginManager, reset_plugin_manager

ROOT = Path(__file__).resolve().parents[1]


def readme_environments() -> dict[str, str]:
    """env name -> the package link of its row in the README's "## Environments" table."""
    section = (ROOT / "README.md").read_text().split("\n## Environments\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|.*\]\(([^)]+)\) \|$", section, re.M)
    return dict(rows)


def listed_by_agentgym_envs(capsys) -> set[str]:
    """The names in the table `agentgym envs` prints with every installed plugin loaded."""
    reset_plugin_manager(PluginManager(autoload=True))
    try:
        assert envs.run(argparse.Namespace()) == 0
    finally:
        reset_plugin_manager()
    table = capsys.readouterr().out.split("\nNot installed:", 1)[0]
    return {line.split()[0] for line in table.splitlines()[2:] if line.strip() and not line.startswith("warning")}


def test_readme_names_every_environment_agentgym_envs_lists(capsys):
    listed = listed_by_agentgym_envs(capsys)
    assert listed, "agentgym envs listed nothing"
    named = readme_environments()
    missing = sorted(listed - set(named))
    assert not missing, f"README's Environments table lacks {missing}"


def test_readme_names_every_first_party_environment_even_when_not_installed():
    named = readme_environments()
    first_party = {name for kind, name in KNOWN_PROVIDERS if kind == "env"}
    assert first_party <= set(named), sorted(first_party - set(named))


def test_every_environment_row_links_a_page_that_exists():
    for name, link in readme_environments().items():
        assert (ROOT / link).is_file(), f"README row {name!r} links {link}, which does not exist"
