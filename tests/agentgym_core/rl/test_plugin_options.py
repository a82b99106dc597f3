"""Estimator and scheduler plugins take typed options of their own in the recipe's sections.

The scheduler is the example third-party package's (examples/agentgym_env_guess, ``guess_warmup``);
the estimator is defined here the way its README section shows.
"""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import Field

from agentgym_core import hookimpl
from agentgym_core.plugins import PluginError
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.checks import check_estimator
from agentgym_core.rl.config import load_config
from agentgym_core.rl.estimator_api import AdvantageConfig, AdvantageOutput
from agentgym_core.rl.plugin_options import bind_plugin_options
from agentgym_core.rl.trainer import train

guess_plugin = pytest.importorskip("agentgym_env_guess.plugin")


class BaselineOptions(AdvantageConfig):
    """``algorithm.advantage`` of the ``baseline`` estimator."""

    baseline: float = Field(0.5, description="Subtracted from each token's reward-to-go.")


received: list[AdvantageConfig] = []


def baseline_estimator(batch, config: BaselineOptions) -> AdvantageOutput:
    """Reward-to-go minus a fixed baseline, on policy tokens only."""
    received.append(config)
    returns = batch.token_rewards.flip(-1).cumsum(-1).flip(-1) * batch.mask  # (B, T)
    return AdvantageOutput(advantages=(returns - config.baseline) * batch.mask, returns=returns)


class BaselinePlugin:
    @hookimpl
    def agentgym_register_advantage_estimators(self, register):
        register("baseline", baseline_estimator, options=BaselineOptions)


@pytest.fixture
def plugins(pm):
    pm.register(guess_plugin, "guess")
    pm.register(BaselinePlugin(), "baseline-test")
    return pm


def recipe(*overrides: str):
    return load_config(None, ["envs=[{name: guess, max_concurrency: 2}]", "algorithm.estimator=baseline",
                              "algorithm.rounds_ctrl.type=guess_warmup", *overrides])


def test_plugins_receive_their_own_typed_options(plugins):
    config = bind_plugin_options(recipe("algorithm.advantage.baseline=0.2", "algorithm.rounds_ctrl.warmup_steps=4",
                                        "algorithm.rounds_ctrl.rounds=9"), plugins)
    assert isinstance(config.algorithm.advantage, BaselineOptions) and config.algorithm.advantage.baseline == 0.2
    rounds = config.algorithm.rounds_ctrl
    assert type(rounds).__name__ == "WarmupRoundsConfig" and rounds.warmup_steps == 4 and rounds.warmup_rounds == 3
    scheduler = plugins.get("round_scheduler", "guess_warmup")(rounds)
    assert [scheduler.horizon(s) for s in (0, 3, 4)] == [3, 3, 9]
    check_estimator(baseline_estimator, BaselineOptions())  # the conformance checker, with its own defaults


def test_unknown_and_bad_plugin_options_say_what_is_valid(plugins):
    with pytest.raises(ConfigError, match=r"'algorithm\.advantage\.baselin'\. Did you mean 'algorithm\.advantage\.baseline'\?"):
        bind_plugin_options(recipe("algorithm.advantage.baselin=0.2"), plugins)
    with pytest.raises(ConfigError, match=r"Did you mean 'algorithm\.rounds_ctrl\.warmup_steps'\?.*round scheduler 'guess_warmup'"):
        bind_plugin_options(recipe("algorithm.rounds_ctrl.warmup_step=2"), plugins)
    with pytest.raises(ConfigError, match=r"algorithm\.rounds_ctrl\.warmup_rounds: Input should be greater than or equal to 1"):
        bind_plugin_options(recipe("algorithm.rounds_ctrl.warmup_rounds=0"), plugins)
    # The builtin scheduler takes none of them.
    with pytest.raises(ConfigError, match=r"'algorithm\.rounds_ctrl\.warmup_steps'.*round scheduler 'fixed'"):
        bind_plugin_options(recipe("algorithm.rounds_ctrl.type=fixed", "algorithm.rounds_ctrl.warmup_steps=2"), plugins)


def test_an_options_model_of_the_wrong_kind_is_a_plugin_error(plugins):
    class Wrong:
        @hookimpl
        def agentgym_register_advantage_estimators(self, register):
            def estimate(batch, config):
                raise AssertionError("not called")
            register("wrong", estimate, options=dict)

    plugins.register(Wrong(), "wrong-test")
    with pytest.raises(PluginError, match="must be a subclass of agentgym_core.rl.estimator_api.AdvantageConfig"):
        bind_plugin_options(recipe("algorithm.estimator=wrong"), plugins)


def test_a_run_uses_the_options_saves_them_and_the_observer_reports(tmp_path, plugins, tiny_config):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    received.clear()
    run_dir = tmp_path / "run"
    config = tiny_config(run_dir, **{"envs": "[{name: guess, max_concurrency: 2}]", "trainer.steps": 2,
                                     "trainer.eval_tasks": 0, "algorithm.estimator": "baseline",
                                     "algorithm.advantage.baseline": 0.25, "algorithm.rounds_ctrl.type": "guess_warmup",
                                     "algorithm.rounds_ctrl.warmup_steps": 1, "algorithm.rounds_ctrl.warmup_rounds": 1,
                                     "algorithm.rounds_ctrl.rounds": 2})
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, plugin_manager=plugins, model=model, tokenizer=tokenizer)
    assert [c.baseline for c in received] == [0.25, 0.25]  # the estimator got its typed options each step
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["horizon"] for s in steps if s["kind"] == "train"] == [1.0, 2.0]  # warm-up, then the full budget
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())["algorithm"]
    assert saved["advantage"]["baseline"] == 0.25 and saved["rounds_ctrl"]["warmup_rounds"] == 1
    # --resume reads config.yaml back: the options survive the round trip.
    again = bind_plugin_options(load_config(run_dir / "config.yaml"), plugins)
    assert again.algorithm.rounds_ctrl.warmup_steps == 1 and again.algorithm.advantage.baseline == 0.25
    # The example package's observer wrote its per-step tally for this guess run.
    assert set(json.loads((run_dir / "guess_turns.json").read_text())) == {"0", "1"}


class TwoTurns:
    """A plugin's scheduler that plays two turns whatever the recipe's ``rounds`` say."""

    def horizon(self, step):
        return 2

    def update(self, step, metrics):
        return None

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        return None


class TwoTurnsPlugin:
    @hookimpl
    def agentgym_register_round_schedulers(self, register):
        register("two_turns", lambda config: TwoTurns())


def test_evaluations_play_the_plugin_schedulers_horizon_not_the_recipes_rounds(tmp_path, pm, tiny_config):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pm.register(TwoTurnsPlugin(), "two-turns-test")
    run_dir = tmp_path / "run"
    config = tiny_config(run_dir, **{"trainer.steps": 1, "trainer.eval_tasks": 1, "trainer.eval_before": "true",
                                     "algorithm.rounds_ctrl.type": "two_turns", "algorithm.rounds_ctrl.rounds": 5})
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    logged = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [e["horizon"] for e in logged if e["kind"] == "train"] == [2]
    assert [e["horizon"] for e in logged if e["kind"] == "eval"] == [2, 2]  # before and after: not rounds' 5
