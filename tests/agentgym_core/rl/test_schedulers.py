"""Round schedulers: stage boundaries, resume exactness, the anchor's keys, the adaptive rule."""

import pytest

from agentgym_core.plugins import PluginManager
from agentgym_core.schedulers import RoundScheduler, RoundsConfig


def make(**kw) -> RoundScheduler:
    config = RoundsConfig(**kw)
    return PluginManager(autoload=False).get("round_scheduler", config.type)(config)


def test_fixed():
    s = make(type="fixed", rounds=15)
    assert {s.horizon(k) for k in range(0, 1000, 37)} == {15}


def test_stepwise_stage_boundaries_match_anchor_babyai_schedule():
    s = make(type="scaling_inter_stepwise", rounds=[6, 13, 20], steps_scaling_inter=100)
    assert [s.horizon(k) for k in (0, 99, 100, 199, 200, 10_000)] == [6, 6, 13, 13, 20, 20]


def test_stepwise_resume_equals_uninterrupted():
    uninterrupted = make(type="scaling_inter_stepwise", rounds=[2, 4, 8], steps_scaling_inter=3)
    horizons = [uninterrupted.horizon(k) for k in range(12)]
    for resume_at in range(12):
        resumed = make(type="scaling_inter_stepwise", rounds=[2, 4, 8], steps_scaling_inter=3)
        resumed.load_state_dict(uninterrupted.state_dict())
        assert [resumed.horizon(k) for k in range(resume_at, 12)] == horizons[resume_at:]


def test_adaptive_advances_on_success_and_resumes_exactly():
    kw = dict(type="adaptive", rounds=[3, 6, 9], threshold=0.5, window=2, min_steps_per_stage=2)
    s = make(**kw)
    successes = [0.0, 1.0, 1.0, 0.0, 0.9, 0.9, 0.1, 1.0, 1.0, 1.0]
    seen = []
    for step, succ in enumerate(successes):
        seen.append(s.horizon(step))
        s.update(step, {"success": succ})
        if step == 4:
            saved = s.state_dict()
    # window mean reaches .5 after step 1 ((0+1)/2) -> stage 1 from step 2;
    # then needs 2 fresh entries: steps 2,3 -> (1+0)/2 = .5 -> stage 2 from step 4.
    assert seen == [3, 3, 6, 6, 9, 9, 9, 9, 9, 9]
    resumed = make(**kw)
    resumed.load_state_dict(saved)
    assert resumed.horizon(5) == s.horizon(5)


def test_anchor_keys_are_accepted_and_unknown_rejected():
    RoundsConfig.model_validate({"type": "scaling_inter_stepwise", "rounds": [10, 20, 30], "steps_scaling_inter": 100})
    # Unknown keys are kept until the scheduler is known (a plugin may take its own), then rejected.
    pytest.importorskip("agentgym_estimators")
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.plugin_options import bind_plugin_options

    config = load_config(None, ["envs=[{name: x}]", "algorithm.rounds_ctrl.steps_scaling=3"])
    with pytest.raises(ValueError, match=r"Did you mean 'algorithm\.rounds_ctrl\.steps_scaling_inter'"):
        bind_plugin_options(config, PluginManager(autoload=True, allow=["estimators", "transformers"]))
    with pytest.raises(ValueError, match="positive"):
        RoundsConfig(rounds=[5, 0])


def test_the_final_horizon_is_the_schedulers_own():
    from agentgym_core.schedulers import final_horizon

    assert final_horizon(make(type="fixed", rounds=[8, 4]), steps=10) == 4  # fixed plays the list's last entry
    assert final_horizon(make(type="scaling_inter_stepwise", rounds=[6, 13, 20], steps_scaling_inter=100), 50) == 20
    assert final_horizon(make(type="adaptive", rounds=[2, 5]), steps=3) == 5

    class Ramp:  # a plugin's scheduler without max_horizon(): the longest horizon of the run's steps
        def horizon(self, step):
            return 1 + step

    assert final_horizon(Ramp(), steps=4) == 4
    with pytest.raises(ValueError, match="final horizon of 0"):
        final_horizon(type("Broken", (), {"max_horizon": lambda self: 0})(), steps=1)
