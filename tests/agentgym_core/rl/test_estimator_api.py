"""The estimator contract (rl.estimator_api, rl.checks): each estimator's minimum group size, checked against the
recipe's group_size; drop_zero_advantage off by default."""

from __future__ import annotations

import pytest

from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import AlgorithmConfig


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_group_size_one_with_a_group_baseline_is_a_config_error(estimator, tmp_path, pm, tiny_config):
    from agentgym_core.rl.config import check_group_size
    from agentgym_core.rl.trainer import train

    config = tiny_config(tmp_path / "run", **{"algorithm.estimator": estimator, "rollout.group_size": 1})
    registered = pm.registration("advantage_estimator", estimator)
    assert registered.spec.min_group_size == 2  # declared where the plugin registers it
    with pytest.raises(ConfigError, match=r"rollout.group_size=1 .* needs at least 2 .*reinforce_pp"):
        check_group_size(config, registered.obj, registered.declared("min_group_size"))
    with pytest.raises(ConfigError, match="rollout.group_size=1"):  # train() refuses before loading anything
        train(config, plugin_manager=pm)
    ok = tiny_config(tmp_path / "run", **{"algorithm.estimator": estimator, "rollout.group_size": 2})
    check_group_size(ok, registered.obj, registered.declared("min_group_size"))


def test_estimators_without_a_group_baseline_accept_group_size_one(tmp_path, pm, tiny_config):
    from agentgym_core.rl.config import check_group_size

    config = tiny_config(tmp_path / "run", **{"algorithm.estimator": "reinforce_pp", "rollout.group_size": 1})
    registered = pm.registration("advantage_estimator", "reinforce_pp")
    check_group_size(config, registered.obj, registered.declared("min_group_size"))


def test_check_estimator_rejects_a_bad_min_group_size():
    from agentgym_core.rl.checks import EstimatorCheckError, check_estimator
    from agentgym_estimators import grpo

    def bad(batch, config):
        return grpo(batch, config)

    for value, message in ((0, "int >= 1"), ("2", "int >= 1"), (3, "groups of 2")):
        with pytest.raises(EstimatorCheckError, match=message):
            check_estimator(bad, declared_min_group_size=value)


# -- drop_zero_advantage --------------------------------------------------------------------------


def test_drop_zero_advantage_is_off_by_default_like_the_anchor_and_verl():
    # Tied GRPO groups keep their KL and entropy terms and their weight in the loss normaliser.
    assert AlgorithmConfig().drop_zero_advantage is False
    doc = " ".join(AlgorithmConfig.__doc__.split())  # the reason is in the section's docs
    assert "``drop_zero_advantage`` is off by default" in doc and "KL" in doc
