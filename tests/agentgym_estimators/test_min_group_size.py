"""Estimators whose baseline is the rest of the group declare it where they are registered, so the trainer can
refuse group_size 1."""

from __future__ import annotations

import pytest

from agentgym_core.plugins import PluginManager


@pytest.mark.parametrize(("name", "needed"), [("grpo", 2), ("rloo", 2), ("gigpo", 2), ("gae", None), ("reinforce_pp", None)])
def test_min_group_size_declared(name, needed):
    registered = PluginManager(autoload=True, allow=["estimators"]).registration("advantage_estimator", name)
    assert registered.spec.min_group_size == needed  # read from the registration: nothing imported
    assert registered.declared("min_group_size") == needed
