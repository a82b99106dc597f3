"""Estimators whose baseline is the rest of the group declare it, so the trainer can refuse group_size 1."""

from __future__ import annotations

import pytest

from agentgym_core.rl.estimator_api import min_group_size
from agentgym_estimators import gae, grpo, reinforce_pp, rloo


@pytest.mark.parametrize(("estimate", "needed"), [(grpo, 2), (rloo, 2), (gae, 1), (reinforce_pp, 1)])
def test_min_group_size_declared(estimate, needed):
    assert min_group_size(estimate) == needed
