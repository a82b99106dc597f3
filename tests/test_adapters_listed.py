"""`agentgym envs` lists the third-party adapters with their split sizes, and names the install line of any missing."""

from __future__ import annotations

import argparse

import pytest

from agentgym_core.commands import envs
from agentgym_core.plugins import PluginManager, reset_plugin_manager

ADAPTERS = {
    "textarena": "agentgym_env_textarena",
    "textworld": "agentgym_env_textworld",
    "reasoning_gym": "agentgym_env_reasoning_gym",
    "gem": "agentgym_env_gem",
}


def listing(capsys, allow: list[str]) -> str:
    reset_plugin_manager(PluginManager(autoload=True, allow=allow))
    try:
        assert envs.run(argparse.Namespace()) == 0
    finally:
        reset_plugin_manager()
    return capsys.readouterr().out


def test_envs_lists_every_installed_adapter_with_split_sizes(capsys):
    for package in ADAPTERS.values():
        pytest.importorskip(package)
    rows = {line.split()[0]: line for line in listing(capsys, list(ADAPTERS)).splitlines() if line.strip()}
    for name in ADAPTERS:
        assert "train=" in rows[name] and "test=" in rows[name], rows.get(name)


def test_envs_gives_a_one_line_install_hint_for_an_adapter_that_is_not_installed(capsys):
    out = listing(capsys, ["textarena"])
    section = out.split("Not installed:", 1)[1]
    hints = {line.split(":")[0].strip(): line for line in section.splitlines() if line.strip()}
    assert "pip install -e" in hints["textworld"] and "agentgym_env_textworld" in hints["textworld"]
    assert "reasoning-gym==0.1.23" in hints["gem"]  # why it needs a venv of its own
