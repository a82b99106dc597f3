"""The plugin is found through its entry point and registers the env class."""

from __future__ import annotations

from agentgym_core.plugins import PluginManager
from agentgym_env_textcraft import TextCraftEnv


def test_entry_point_registers_textcraft():
    manager = PluginManager(autoload=True, allow=["textcraft"])
    assert manager.env_class("textcraft") is TextCraftEnv
    assert TextCraftEnv.name == "textcraft"
    assert manager.catalog("env")["textcraft"].summary
