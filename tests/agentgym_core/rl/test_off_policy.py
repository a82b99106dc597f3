"""Behaviour-policy correction (rl/off_policy.py), its place in the loss, the config rules around it."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym_core.rl.config import TrainConfig
from agentgym_core.rl.losses import policy_loss
from agentgym_core.rl.off_policy import behaviour_weights, mismatch_alarm, mismatch_stats

LOG = math.log


def test_truncated_and_decoupled_weights_by_hand():
    # pi_prox / mu per token: 0.5, 1.0, 3.0 (cap 2), and one token off the mask.
    prox = torch.tensor([[LOG(0.1), LOG(0.4), LOG(0.6), LOG(0.9)]])
    mu = torch.tensor([[LOG(0.2), LOG(0.4), LOG(0.2), LOG(0.1)]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    tis = behaviour_weights(prox, mu, mask, correction="tis", cap=2.0)
    decoupled = behaviour_weights(prox, mu, mask, correction="decoupled", cap=2.0)
    assert torch.allclose(tis, torch.tensor([[0.5, 1.0, 2.0, 0.0]]), atol=1e-6)  # 3.0 truncated to the cap
    assert torch.allclose(decoupled, torch.tensor([[0.5, 1.0, 0.0, 0.0]]), atol=1e-6)  # 3.0 left out
    assert behaviour_weights(prox, mu, mask, correction="none", cap=2.0) is None
    assert not tis.requires_grad
    with pytest.raises(ValueError, match="unknown off-policy correction"):
        behaviour_weights(prox, mu, mask, correction="is", cap=2.0)


def test_mismatch_stats_by_hand():
    learner = torch.tensor([[LOG(0.5), LOG(0.3), LOG(0.9)]])
    sampler = torch.tensor([[LOG(0.5), LOG(0.1), LOG(0.1)]])  # r = 1, 3, 9 on the first two: third is masked
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    stats = mismatch_stats(learner, sampler, mask, cap=2.0)
    assert stats["sampler_ratio_mean"] == pytest.approx(2.0)
    assert stats["sampler_ratio_max"] == pytest.approx(3.0)
    assert stats["sampler_ratio_over_cap"] == pytest.approx(0.5)
    assert stats["sampler_kl"] == pytest.approx(((1 - 1 - 0) + (3 - 1 - LOG(3))) / 2)  # k3 = r - 1 - log r
    same = mismatch_stats(learner, learner, mask, cap=2.0)
    assert (same["sampler_ratio_mean"], same["sampler_ratio_over_cap"], same["sampler_kl"]) == (1.0, 0.0, 0.0)


def test_alarm_thresholds():
    assert mismatch_alarm(0.01, warn=0.05, stop=1.0) == "ok"
    assert mismatch_alarm(0.2, warn=0.05, stop=1.0) == "warn"
    assert mismatch_alarm(1.5, warn=0.05, stop=1.0) == "stop"
    assert mismatch_alarm(float("nan"), warn=0.05, stop=1.0) == "stop"
    assert mismatch_alarm(1.5, warn=0.05, stop=None) == "warn"


def test_weights_scale_each_tokens_surrogate():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3)
    weights = torch.tensor([[0.5, 2.0, 1.0]])
    weighted, _ = policy_loss(logp, logp.detach(), adv, mask, weights=weights)
    # ratio 1: the per-token loss is -A, weighted -> -(0.5 - 2 + 2) / 3
    assert float(weighted.detach()) == pytest.approx(-(0.5 * 1.0 - 2.0 * 1.0 + 1.0 * 2.0) / 3)
    weighted.backward()
    assert torch.allclose(logp.grad, -(weights * adv) / 3)


def test_corrected_gradient_is_the_on_policy_gradient_from_samples_of_an_old_policy():
    """Samples from mu (the policy k updates back); the corrected loss's gradient matches the gradient of
    E_pi[A], the uncorrected one the gradient of something else."""
    torch.manual_seed(0)
    advantage = torch.tensor([1.0, -0.5, 2.0, 0.0, -1.0])  # A(a)
    theta = torch.tensor([0.3, -0.2, 0.8, 0.1, -0.4])  # the learner now
    old_theta = torch.tensor([0.9, 0.4, -0.6, 0.2, 0.5])  # the sampler, k updates back
    pi, mu = torch.softmax(theta, 0), torch.softmax(old_theta, 0)
    # The exact on-policy gradient of J = sum_a pi(a) A(a).
    exact = torch.autograd.functional.jacobian(lambda t: (torch.softmax(t, 0) * advantage).sum(), theta)

    n = 200_000
    sampled = torch.multinomial(mu, n, replacement=True)  # (N,)
    mask = torch.ones(1, n)
    adv = advantage[sampled].unsqueeze(0)  # (1, N)
    mu_logp = torch.log(mu)[sampled].unsqueeze(0)

    def gradient(correction: str) -> torch.Tensor:
        t = theta.clone().requires_grad_(True)
        logp = torch.log_softmax(t, 0)[sampled].unsqueeze(0)  # (1, N)
        weights = behaviour_weights(logp.detach(), mu_logp, mask, correction=correction, cap=1e6)
        loss, _ = policy_loss(logp, logp.detach(), adv, mask, weights=weights, clip_ratio_c=None)
        (-loss).backward()  # the loss is -J's surrogate
        return t.grad

    corrected, uncorrected = gradient("tis"), gradient("none")
    assert torch.allclose(corrected, exact, atol=0.01), (corrected, exact)
    assert (uncorrected - exact).abs().max() > 0.1, "the test's two policies are too close to tell apart"
    assert float((pi / mu).max()) < 1e6  # the cap did not bite: the estimate is unbiased here


def _config(**overrides) -> TrainConfig:
    data = {"envs": [{"name": "guess"}], "model": {"path": "tiny"}}
    for dotted, value in overrides.items():
        section, key = dotted.split("__")
        data.setdefault(section, {})[key] = value
    return TrainConfig.model_validate(data)


def test_current_old_logprobs_are_refused_with_stale_samples():
    no_kl = {"coef": 0.0}  # with a KL term the scoring pass runs anyway
    with pytest.raises(ValueError, match="old_logprobs=current with rollout.max_staleness=2"):
        _config(rollout__max_staleness=2, algorithm__old_logprobs="current", algorithm__kl=no_kl)
    assert _config(rollout__max_staleness=2, algorithm__kl=no_kl).algorithm.recomputes_old_logprobs  # auto
    assert not _config(algorithm__kl=no_kl).algorithm.recomputes_old_logprobs


def test_auto_correction_is_on_wherever_the_sampler_is_not_the_learners_own_module(pm):
    from agentgym_core.rl.plugin_options import bind_plugin_options

    def bound(**overrides) -> TrainConfig:
        return bind_plugin_options(_config(**overrides), pm)

    assert bound().off_policy_correction == "none"  # a backend sharing the module, fp32, synchronous
    assert _config().off_policy_correction == "tis"  # not bound to its backend: nothing says it shares the module
    assert bound(rollout__max_staleness=1).off_policy_correction == "tis"
    assert bound(model__mixed_precision="bf16").off_policy_correction == "tis"
    assert bound(trainer__learners=2).off_policy_correction == "tis"
    chosen = {"correction": "decoupled"}
    assert _config(algorithm__off_policy=chosen).off_policy_correction == "decoupled"
    assert _config(algorithm__off_policy=chosen).algorithm.recomputes_old_logprobs
    with pytest.raises(ValueError, match="decoupled takes the recomputed log-probs"):
        _config(algorithm__off_policy=chosen, algorithm__old_logprobs="current")


def _metrics(run_dir) -> list[dict]:
    import json

    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"kind"' not in x
            or '"train"' in x]


def test_a_run_logs_the_mismatch_and_stops_when_the_sampler_disagrees(tmp_path, pm, tiny_config):
    """A real precision mismatch (the learner scores under bf16 autocast, the backend sharing its module
    samples in fp32): the step's sampler_* metrics see it, and a stop threshold below it ends the run
    with a message naming the causes."""
    from agentgym_core.rl.trainer import SamplerMismatchError, train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    common = {"trainer.steps": 1, "trainer.eval_tasks": 0, "model.mixed_precision": "bf16",
              "algorithm.kl.coef": 0.0}
    model, tokenizer = tiny_chat_model(seed=1)
    train(tiny_config(tmp_path / "ok", **common, **{"algorithm.off_policy.stop_kl": "null"}),
          plugin_manager=pm, model=model, tokenizer=tokenizer)
    line = _metrics(tmp_path / "ok")[-1]
    assert 0 < line["sampler_kl"] < 0.1 and line["sampler_ratio_max"] >= 1.0
    assert line["is_weight_mean"] > 0  # auto picked tis: bf16 learner, fp32 sampler
    model, tokenizer = tiny_chat_model(seed=1)
    tight = tiny_config(tmp_path / "stop", **common, **{"algorithm.off_policy.stop_kl": line["sampler_kl"] / 100})
    with pytest.raises(SamplerMismatchError, match=r"sampler_kl .* past algorithm.off_policy.stop_kl=.*"
                                                   r"weight sync.*template.*precision"):
        train(tight, plugin_manager=pm, model=model, tokenizer=tokenizer)


@pytest.mark.parametrize("old_logprobs", ["recompute", "current"])
def test_one_envs_broken_sampler_stops_the_run_before_its_update_and_the_step_is_logged(
        tmp_path, monkeypatch, tiny_config, old_logprobs):
    """One env of four tasks samples with log-probs 1 nat too low (a broken chat template does this):
    its own sampler_kl is e - 2 = 0.72, past stop_kl 0.5, while the batch's mean over every env stays
    far below. The run stops on the worst env, before any optimizer step, and the step is in the log."""
    from word_env import TwoWordPlugin

    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.rollout_worker import RolloutWorker
    from agentgym_core.rl.trainer import SamplerMismatchError, train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pytest.importorskip("agentgym_estimators")
    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(TwoWordPlugin(), "words")
    collect = RolloutWorker.collect

    def broken_for_word(self, step, sampling_round=0):
        result = collect(self, step, sampling_round)
        for t in result.trajectories:
            if t.env == "word":
                t.logprobs = [lp - 1.0 if m else lp for lp, m in zip(t.logprobs, t.loss_mask, strict=True)]
        return result

    monkeypatch.setattr(RolloutWorker, "collect", broken_for_word)
    overrides = {"envs": "[{name: word, max_concurrency: 1}, {name: word2, max_concurrency: 1, weight: 3}]",
                 "rollout.tasks_per_step": 4, "rollout.group_size": 2, "trainer.eval_tasks": 0,
                 "trainer.steps": 2, "algorithm.off_policy.stop_kl": 0.5, "algorithm.off_policy.correction": "tis"}
    if old_logprobs == "current":
        overrides.update({"algorithm.kl.coef": 0.0, "algorithm.old_logprobs": "current",
                          "algorithm.mini_batches": 1, "algorithm.ppo_epochs": 1})
    model, tokenizer = tiny_chat_model(seed=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(SamplerMismatchError, match=r"step 1: .*sampler_kl/word 0\.7.*update was skipped"):
        train(tiny_config(tmp_path / "run", **overrides), plugin_manager=pm, model=model, tokenizer=tokenizer)
    (line,) = _metrics(tmp_path / "run")  # the step that tripped the check is logged
    assert line["step"] == 1 and line["mismatch_stopped"] == 1.0
    assert line["sampler_kl/word"] == pytest.approx(math.e - 2, abs=0.05)
    assert line["sampler_kl/word2"] < 0.01 and line["sampler_kl"] < 0.5  # the batch mean hides it
    assert line["sampler_kl_worst"] == line["sampler_kl/word"]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "the update was applied"


def test_mismatch_per_label_by_hand():
    from agentgym_core.rl.off_policy import mismatch_by_label, mismatch_sums

    learner = torch.tensor([[0.0, LOG(0.5), LOG(0.5)], [0.0, LOG(0.5), LOG(0.5)]])
    sampler = torch.tensor([[0.0, LOG(0.5), LOG(0.5)], [0.0, LOG(0.25), LOG(0.5)]])  # row 1: r = 2 on one token
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    found = mismatch_by_label(mismatch_sums(learner, sampler, mask, [("a", "worker0"), ("b", "worker0")]))
    k3 = 2 - 1 - LOG(2)
    assert found["sampler_kl/a"] == 0.0 and found["sampler_kl/b"] == pytest.approx(k3 / 2)
    assert found["sampler_kl/worker0"] == pytest.approx(k3 / 4)
    assert found["sampler_kl_worst"] == found["sampler_kl/b"]


def test_truncated_episodes_counted_and_dropped_or_repriced():
    from agentgym_core.rl.batch import apply_truncation_policy
    from agentgym_core.rollout.trajectory import Trajectory, Turn

    def trajectory(truncated: bool, reward: float) -> Trajectory:
        turn = Turn.model_validate({"index": 0, "context_span": {"start": 0, "end": 1},
                                    "action_span": {"start": 1, "end": 2}, "text": "a", "action": "a",
                                    "finish_reason": "eos", "observation": "o", "reward": reward,
                                    "reward_index": 1})
        return Trajectory(env="e", task_id=0, token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0],
                          turns=[turn], truncated=truncated, outcome_reward=reward)

    batch = [trajectory(False, 1.0), trajectory(True, 0.0)]
    assert apply_truncation_policy(batch, "train") == batch
    assert apply_truncation_policy(batch, "drop") == batch[:1]
    repriced = apply_truncation_policy(batch, -0.5)
    assert [t.turns[-1].reward for t in repriced] == [1.0, -0.5]
    assert batch[1].turns[-1].reward == 0.0  # the originals are left as they were, for the logs

    from agentgym_core.evaluation.results import metric_record

    assert metric_record(batch)["truncated"] == 1.0 and metric_record(batch)["e/truncated"] == 1.0


def test_an_engine_on_the_learners_gpu_is_refused_where_it_would_sample_at_the_wrong_time():
    colocated = {"gpu_sharing": "colocate"}
    with pytest.raises(ValueError, match="gpu_sharing=colocate with rollout.max_staleness=1.*gpu_sharing: separate"):
        _config(rollout__backend="vllm", rollout__backend_options=colocated, rollout__max_staleness=1)
    with pytest.raises(ValueError, match=r"sleep_level=2 discards .*rollout.rerun_failed > 0, trainer.eval_before"):
        _config(rollout__backend="vllm", rollout__backend_options={**colocated, "sleep_level": 2})
    # The weight-sync probe (on by default) scores on the engine after each load, and the end of that
    # scoring batch puts it to sleep at level 2 again: the first rollout would find no weights.
    with pytest.raises(ValueError, match=r"sleep_level=2 discards .*rollout.sync_check_tolerance"):
        _config(rollout__backend="vllm", rollout__backend_options={**colocated, "sleep_level": 2},
                rollout__rerun_failed=0, trainer__eval_before=False)
    quiet = _config(rollout__backend="vllm", rollout__backend_options={**colocated, "sleep_level": 2},
                    rollout__rerun_failed=0, trainer__eval_before=False, rollout__sync_check_tolerance=None)
    assert quiet.rollout.backend_options["sleep_level"] == 2
    assert _config(rollout__backend="vllm", rollout__backend_options=colocated).rollout.max_staleness == 0


@pytest.mark.parametrize(("constrain", "precision", "names_constraint"),
                         [(True, "bf16", True), (True, "auto", True), (True, "no", False), (False, "bf16", False)])
def test_the_mismatch_warning_names_constrained_actions_under_bf16_first(tmp_path, tiny_config, capsys, constrain,
                                                                         precision, names_constraint):
    """Constrained actions under bf16 autocast drift past warn_kl for a known reason (bench/precision_gap.py):
    the warning says so before the generic causes, and only for that combination."""
    from agentgym_core.rl.trainer import _sampler_mismatch

    cfg = tiny_config(tmp_path, **{"rollout.constrain_actions": constrain, "model.mixed_precision": precision})
    metrics = {"sampler_kl": 0.08, "sampler_kl/word": 0.08, "sampler_ratio_mean": 1.1, "sampler_ratio_max": 20.0,
               "sampler_ratio_over_cap": 0.03}
    assert _sampler_mismatch(metrics, cfg, 8) is None  # past warn_kl (0.05), under stop_kl (0.5): a warning
    out = capsys.readouterr().out
    assert "step 9:" in out and "warn_kl=0.05" in out and "weight sync" in out
    assert ("Expected in part with rollout.constrain_actions" in out) is names_constraint
    if names_constraint:
        assert out.index("constrain_actions") < out.index("weight sync")
        assert f"model.mixed_precision={precision}" in out and "model.mixed_precision: no" in out
