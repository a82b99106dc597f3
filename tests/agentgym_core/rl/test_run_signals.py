"""Settings and steps that do nothing say so: a missing TensorBoard warns, a step with no signal is marked."""

from __future__ import annotations

import json
import sys
import warnings

import pytest

from agentgym_core import hookimpl
from agentgym_core.rl.estimator_api import AdvantageOutput
from agentgym_core.rl.trainer import train
from agentgym_core.training import tracking
from agentgym_core.training.tracking import MetricsWriter


def test_tensorboard_on_but_not_installed_warns_once(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # `import` of it raises ImportError
    monkeypatch.setattr(tracking, "_warned", set())
    with pytest.warns(UserWarning, match="trainer.tensorboard is true but TensorBoard is not installed"):
        MetricsWriter(tmp_path / "a", tensorboard=True).close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MetricsWriter(tmp_path / "b", tensorboard=True).close()  # the same process: said already
        MetricsWriter(tmp_path / "c", tensorboard=False).close()
    assert not [w for w in caught if "TensorBoard" in str(w.message)]


class ConstantEstimators:
    """Estimators whose advantage is the same number on every sampled token (0: every group tied)."""

    @hookimpl
    def agentgym_register_advantage_estimators(self, register):
        def constant(value):
            def estimate(batch, config):
                advantages = batch.mask * value  # (B, T)
                return AdvantageOutput(advantages=advantages, returns=advantages.clone())
            return estimate

        register("all_tied", constant(0.0))
        register("all_positive", constant(1.0))


@pytest.mark.parametrize(("estimator", "skipped"), [("all_tied", 1.0), ("all_positive", 0.0)])
def test_a_step_with_no_advantage_is_marked_skipped(tmp_path, pm, tiny_config, capsys, estimator, skipped):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pm.register(ConstantEstimators(), "constant-test")
    config = tiny_config(tmp_path / "run", **{"algorithm.estimator": estimator, "trainer.steps": 1,
                                              "trainer.eval_tasks": 0, "trainer.progress": "true",
                                              # tied rows are dropped, so a step of tied groups has no update
                                              "algorithm.drop_zero_advantage": "true"})
    model, tokenizer = tiny_chat_model(seed=0)
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = [x for x in lines if x["kind"] == "train"][-1]
    assert step["skipped_update"] == skipped
    assert step["trained_trajectories"] == (0 if skipped else step["trajectories"])
    # the reward signal is counted every step, dynamic sampling or not: groups whose env rewards differ
    groups: dict[int, set[float]] = {}
    for line in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines():
        t = json.loads(line)
        if not t["failed"]:
            groups.setdefault(t["task_id"], set()).add(t["outcome_reward"])
    assert step["sampled_groups"] == len(groups) > 0
    assert step["mixed_groups"] == sum(len(rewards) > 1 for rewards in groups.values())
    shown = "update=skipped (groups tied)" in capsys.readouterr().err  # the progress bar's postfix
    assert shown is bool(skipped)
