"""Training-correctness fixes (issue 16, item 5), each pinned by a test that fails without it.

Infrastructure failures left out of the loss; the estimator's minimum group size; drop_zero_advantage
off by default; dual clip and the log-ratio clamp; the transformers version gate of packing; the
separate critic. The GPU recipes' anchor mapping is pinned in test_anchor_recipes.py.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch

from agentgym_core import hookimpl
from agentgym_core.rl.batch import trainable_trajectories
from agentgym_core.rl.config import AlgorithmConfig, ConfigError, load_config
from agentgym_core.rl.losses import (
    LOG_RATIO_BOUND,
    clamped_log_ratio,
    dual_clip,
    kl_penalty,
    policy_loss,
    value_loss,
)
from agentgym_core.rollout.trajectory import Trajectory

# -- infrastructure failures ----------------------------------------------------------------------


def _traj(task_id: int, *, failed: bool = False, sampled: int = 2) -> Trajectory:
    return Trajectory(env="word", task_id=task_id, token_ids=[1, 2, 3, 4], loss_mask=[0, 0] + [1] * sampled
                      + [0] * (2 - sampled), logprobs=[0.0] * 4, failed=failed,
                      failure_reason="env_error: step raised RuntimeError: boom" if failed else None)


def test_trainable_trajectories_leaves_out_and_counts_infra_failures():
    trajs = [_traj(0), _traj(1, failed=True), _traj(2, sampled=0), _traj(3), _traj(4, failed=True, sampled=0)]
    kept, infra_failed = trainable_trajectories(trajs)
    assert [t.task_id for t in kept] == [0, 3]  # order kept; failed and empty rows gone
    assert infra_failed == 2  # both failed ones counted, the empty-but-healthy one not


def test_env_timeout_s_is_a_recipe_key_with_the_anchors_default():
    config = load_config(None, ["envs=[{name: x}]"])
    assert config.rollout.env_timeout_s == 600.0
    assert load_config(None, ["envs=[{name: x}]", "rollout.env_timeout_s=5"]).rollout.env_timeout_s == 5.0
    with pytest.raises(ConfigError, match="env_timeout_s"):
        load_config(None, ["envs=[{name: x}]", "rollout.env_timeout_s=0"])


def _flaky_plugin():
    """WordEnv whose step crashes on tasks 1, 5, ... and hangs for 3 s on tasks 3, 7, ... (a real server)."""
    from word_env import WordEnv

    class FlakyWordEnv(WordEnv):
        name = "flaky"

        def reset(self, task_id, seed=None):
            self.task_id = task_id
            return super().reset(task_id, seed)

        def step(self, action):
            if self.task_id % 4 == 1:
                raise RuntimeError("simulated environment crash")
            if self.task_id % 4 == 3:
                time.sleep(3.0)  # longer than the run's rollout.env_timeout_s
            return super().step(action)

    class FlakyPlugin:
        @hookimpl
        def agentgym_register_envs(self, register) -> None:
            register("flaky", FlakyWordEnv, summary="test env that crashes or hangs on some tasks")

    return FlakyPlugin()


def test_trainer_leaves_env_errors_and_timeouts_out_of_the_loss(tmp_path, tiny_config):
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(_flaky_plugin(), "flaky-test")
    model, tokenizer = tiny_chat_model(seed=0)
    config = tiny_config(tmp_path / "run", **{
        "envs": "[{name: flaky, max_concurrency: 8, train_tasks: [0, 1, 2, 3]}]",
        "rollout.tasks_per_step": 4, "rollout.group_size": 2, "rollout.env_timeout_s": 0.5,
        "trainer.steps": 1, "trainer.eval_tasks": 0,
    })
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    line = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    # 2 crashes + 2 timeouts (the 3 s step outlives env_timeout_s=0.5), each re-run once
    # (rollout.rerun_failed=1) and failing again: all 8 failed attempts kept and counted.
    assert line["trajectories"] == 12 and line["reruns"] == 4 and line["failed_after_reruns"] == 4
    assert line["infra_failed"] == 8
    assert line["trained_trajectories"] == 4
    trajs = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    failed = [t for t in trajs if t["failed"]]
    assert sorted(t["task_id"] for t in failed) == [1, 1, 1, 1, 3, 3, 3, 3]
    assert {t["failure_reason"].split(":")[0] for t in failed} == {"env_error", "timeout"}
    assert all("advantages" not in t for t in failed)  # never trained
    assert all("advantages" in t for t in trajs if not t["failed"])


# -- minimum group size ---------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_group_size_one_with_a_group_baseline_is_a_config_error(estimator, tmp_path, pm, tiny_config):
    from agentgym_core.rl.config import check_group_size
    from agentgym_core.rl.trainer import train

    config = tiny_config(tmp_path / "run", **{"algorithm.estimator": estimator, "rollout.group_size": 1})
    with pytest.raises(ConfigError, match=r"rollout.group_size=1 .* needs at least 2 .*reinforce_pp"):
        check_group_size(config, pm.get("advantage_estimator", estimator))
    with pytest.raises(ConfigError, match="rollout.group_size=1"):  # train() refuses before loading anything
        train(config, plugin_manager=pm)
    ok = tiny_config(tmp_path / "run", **{"algorithm.estimator": estimator, "rollout.group_size": 2})
    check_group_size(ok, pm.get("advantage_estimator", estimator))


def test_estimators_without_a_group_baseline_accept_group_size_one(tmp_path, pm, tiny_config):
    from agentgym_core.rl.config import check_group_size

    config = tiny_config(tmp_path / "run", **{"algorithm.estimator": "reinforce_pp", "rollout.group_size": 1})
    check_group_size(config, pm.get("advantage_estimator", "reinforce_pp"))


def test_check_estimator_rejects_a_bad_min_group_size():
    from agentgym_core.rl.checks import EstimatorCheckError, check_estimator
    from agentgym_estimators import grpo

    def bad(batch, config):
        return grpo(batch, config)

    for value, message in ((0, "int >= 1"), ("2", "int >= 1"), (3, "groups of 2")):
        bad.min_group_size = value
        with pytest.raises(EstimatorCheckError, match=message):
            check_estimator(bad)


# -- drop_zero_advantage --------------------------------------------------------------------------


def test_drop_zero_advantage_is_off_by_default_like_the_anchor_and_verl():
    # Tied GRPO groups keep their KL and entropy terms and their weight in the loss normaliser.
    assert AlgorithmConfig().drop_zero_advantage is False
    doc = " ".join(AlgorithmConfig.__doc__.split())  # the reason is in the section's docs
    assert "``drop_zero_advantage`` is off by default" in doc and "KL" in doc


def test_tied_rows_still_get_the_kl_gradient():
    # A row whose advantage is 0 everywhere moves under the KL term alone: the reason not to drop it.
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2)
    pg, _ = policy_loss(logp, logp.detach(), torch.zeros(1, 2), mask)
    kl = (kl_penalty(logp, ref) * mask).sum() / 2
    (pg + 0.001 * kl).backward()
    assert (logp.grad != 0).all()


# -- dual clip and log-ratio clamp ----------------------------------------------------------------


def test_dual_clip_hand_computed():
    per_token = torch.tensor([[5.0, 0.8, -1.2, 4.0]])  # (B, T) clipped-surrogate losses
    adv = torch.tensor([[-1.0, -1.0, 1.0, -2.0]])
    # A=-1: min(5, 3) = 3 ; min(0.8, 3) = 0.8 ; A>0 untouched ; A=-2: min(4, 6) = 4
    assert torch.allclose(dual_clip(per_token, adv, 3.0), torch.tensor([[3.0, 0.8, -1.2, 4.0]]))


def test_policy_loss_dual_clip_caps_a_bad_token_pushed_far_up():
    old = torch.zeros(1, 1)
    new = torch.tensor([[math.log(5.0)]], requires_grad=True)  # ratio 5
    adv = -torch.ones(1, 1)
    mask = torch.ones(1, 1)
    loss, metrics = policy_loss(new, old, adv, mask, clip_low=0.2)  # default clip_ratio_c = 3
    # single clip: max(-A r, -A clip(r)) = max(5, 1.2) = 5; dual clip: min(5, 3 * 1) = 3
    assert loss.item() == pytest.approx(3.0)
    assert metrics["dual_clip_frac"] == 1.0
    loss.backward()
    assert new.grad.item() == 0.0  # capped: no further push
    plain, _ = policy_loss(new, old, adv, mask, clip_low=0.2, clip_ratio_c=None)
    assert plain.item() == pytest.approx(5.0)
    good, _ = policy_loss(new, old, -adv, mask, clip_low=0.2)  # positive advantage: single clip only, -1.2
    assert good.item() == pytest.approx(-1.2)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        policy_loss(new, old, adv, mask, clip_ratio_c=1.0)


def test_clip_ratio_c_is_a_config_key_defaulting_to_verls_value():
    assert AlgorithmConfig().clip_ratio_c == 3.0
    assert load_config(None, ["envs=[{name: x}]", "algorithm.clip_ratio_c=null"]).algorithm.clip_ratio_c is None
    with pytest.raises(ConfigError, match="clip_ratio_c"):
        load_config(None, ["envs=[{name: x}]", "algorithm.clip_ratio_c=0.5"])


def test_log_ratio_clamp_keeps_the_surrogate_finite():
    assert clamped_log_ratio(torch.tensor([100.0, -100.0, 1.5]), torch.zeros(3)).tolist() == [20.0, -20.0, 1.5]
    old = torch.zeros(1, 1)
    new = torch.tensor([[100.0]], requires_grad=True)  # exp(100) overflows float32
    loss, metrics = policy_loss(new, old, -torch.ones(1, 1), torch.ones(1, 1), clip_ratio_c=None)
    assert loss.item() == pytest.approx(math.exp(LOG_RATIO_BOUND), rel=1e-6)  # e^20, not inf
    assert math.isfinite(metrics["approx_kl"])
    loss.backward()
    assert new.grad.item() == 0.0


def test_kl_estimators_clamp_the_log_ratio():
    logp = torch.tensor([[0.0, 0.0]])
    ref = torch.tensor([[30.0, -30.0]])  # log r = +30 and -30 -> clamped to +-20
    k3 = kl_penalty(logp, ref, "k3")
    assert k3[0, 0].item() == pytest.approx(math.exp(20.0) - 21.0, rel=1e-6)  # e^30 - 31 without the clamp
    assert k3[0, 1].item() == pytest.approx(math.exp(-20.0) + 19.0, rel=1e-6)
    assert kl_penalty(logp, ref, "low_var_kl")[0].tolist() == [10.0, 10.0]
    assert kl_penalty(logp, ref, "k1")[0].tolist() == [-20.0, 20.0]
    assert kl_penalty(logp, ref, "k2")[0].tolist() == [200.0, 200.0]


# -- packing needs transformers that detect packed position_ids -----------------------------------


def test_packing_support_problem_versions():
    from agentgym_core.rl.forward import packing_support_problem

    assert packing_support_problem("4.53.1", "2.6.0") is None
    assert packing_support_problem("5.23.0", "2.13.0+cpu") is None
    assert "4.53.1" in packing_support_problem("4.53.0", "2.7.1")  # the mask builder had no packed detection
    assert "4.53.1" in packing_support_problem("4.45.2", "2.7.1")
    assert "torch >= 2.6" in packing_support_problem("4.54.0", "2.5.1")  # transformers drops the packed mask
    assert "not installed" in packing_support_problem(None, "2.6.0")


def test_config_refuses_packing_on_an_old_transformers(monkeypatch):
    from agentgym_core.rl import packing_support

    real = packing_support.installed_version
    monkeypatch.setattr(packing_support, "installed_version",
                        lambda package: "4.52.4" if package == "transformers" else real(package))
    with pytest.raises(ConfigError, match=r"algorithm.packing=true is unsafe.*4.52.4.*algorithm.packing=false"):
        load_config(None, ["envs=[{name: x}]", "algorithm.packing=true"])
    load_config(None, ["envs=[{name: x}]", "algorithm.packing=false"])  # padded rows are always fine


def test_packed_rows_do_not_attend_across_sequences_on_the_installed_transformers():
    from agentgym_core.rl.forward import forward_tokens, installed_version, pack_bins, packing_support_problem
    from agentgym_core.testing.tiny_model import tiny_chat_model

    if packing_support_problem(installed_version("transformers"), installed_version("torch")):
        pytest.skip("the config refuses packing with these versions")
    model, _ = tiny_chat_model(seed=0)
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (10, 5, 5)]
    assert [1, 2] in pack_bins([10, 5, 5], 10)  # the two short sequences share one row
    mask = torch.zeros(3, 10)
    for i, s in enumerate(seqs):
        mask[i, 1: len(s)] = 1
    with torch.no_grad():
        packed = forward_tokens(model, seqs, mask, packing=True, max_tokens=100)
        plain = torch.zeros(3, 10)
        for i, s in enumerate(seqs):
            ids = torch.tensor([s])
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            plain[i, 1: len(s)] = lp
        # Control: the same row with a plain causal mask (what transformers < 4.53.1 built) leaks.
        row = torch.tensor([seqs[1] + seqs[2]])
        pos = torch.tensor([list(range(5)) + list(range(5))])
        leaky = model(input_ids=row, position_ids=pos, attention_mask=torch.ones_like(row), use_cache=False).logits
        leaky_lp = torch.log_softmax(leaky[0, 5:9], -1).gather(-1, row[0, 6:, None]).squeeze(-1)
    assert torch.allclose(packed.logprobs, plain, atol=1e-5)
    assert not torch.allclose(leaky_lp, plain[2, 1:5], atol=1e-3), "control: cross-sequence attention must show"


# -- separate critic ------------------------------------------------------------------------------


def _value_loss_backward(model, critic):
    from agentgym_core.rl.forward import forward_tokens

    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (9, 6)]
    mask = torch.zeros(2, 9)
    mask[0, 3:9] = 1
    mask[1, 2:6] = 1
    out = forward_tokens(model, seqs, mask, packing=False, value_head=critic)
    loss = value_loss(out.values, torch.zeros(2, 9), torch.ones(2, 9), mask, clip=None)
    loss.backward()
    return loss


def _moved(params) -> bool:
    return any(p.grad is not None and bool((p.grad != 0).any()) for p in params)


def test_separate_critic_value_loss_leaves_the_policy_alone():
    from agentgym_core.rl.config import CriticConfig
    from agentgym_core.rl.critic import SeparateCritic, build_critic
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    critic = build_critic(CriticConfig(enabled=True), model, vocab_size=len(tokenizer))  # kind: separate (default)
    assert isinstance(critic, SeparateCritic)
    torch.nn.init.normal_(critic.head.proj.weight)  # a trained head: gradients reach the trunk
    trunk_weight = critic.trunk.get_input_embeddings().weight
    assert torch.equal(trunk_weight, model.get_input_embeddings().weight)  # a copy of the policy's trunk ...
    assert trunk_weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()  # ... not the same tensor
    assert _value_loss_backward(model, critic) > 0
    assert not _moved(model.parameters())
    assert _moved(critic.trunk.parameters()) and _moved(critic.head.parameters())


def test_shared_trunk_value_loss_moves_the_policy():
    from agentgym_core.rl.config import CriticConfig
    from agentgym_core.rl.critic import ValueHead, build_critic
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    head = build_critic(CriticConfig(enabled=True, kind="shared_trunk"), model)
    assert isinstance(head, ValueHead)
    torch.nn.init.normal_(head.proj.weight)
    _value_loss_backward(model, head)
    assert _moved(model.parameters())


def test_separate_critic_and_shared_head_agree_on_packed_and_padded_rows():
    from agentgym_core.rl.config import CriticConfig
    from agentgym_core.rl.critic import build_critic
    from agentgym_core.rl.forward import forward_tokens, installed_version, packing_support_problem
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    critic = build_critic(CriticConfig(enabled=True), model)
    torch.nn.init.normal_(critic.head.proj.weight)
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (10, 4, 6)]
    mask = torch.zeros(3, 10)
    for i, s in enumerate(seqs):
        mask[i, 1: len(s)] = 1
    with torch.no_grad():
        padded = forward_tokens(model, seqs, mask, packing=False, value_head=critic)
        # A copied trunk sees what the policy sees: its values equal a shared head with the same weights.
        shared = build_critic(CriticConfig(enabled=True, kind="shared_trunk"), model)
        shared.load_state_dict(critic.head.state_dict())
        same = forward_tokens(model, seqs, mask, packing=False, value_head=shared)
        assert torch.allclose(padded.values, same.values, atol=1e-5)
        if not packing_support_problem(installed_version("transformers"), installed_version("torch")):
            packed = forward_tokens(model, seqs, mask, packing=True, value_head=critic)
            assert torch.allclose(packed.values, padded.values, atol=1e-5)


def test_critic_model_with_too_few_embeddings_is_refused():
    from agentgym_core.rl.config import CriticConfig
    from agentgym_core.rl.critic import build_critic
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    with pytest.raises(ValueError, match="same tokenizer"):
        build_critic(CriticConfig(enabled=True), model, vocab_size=10 * len(tokenizer))


def test_gae_defaults_to_a_separate_critic():
    config = load_config(None, ["envs=[{name: x}]", "algorithm.estimator=gae", "algorithm.critic.enabled=true"])
    assert config.algorithm.critic.kind == "separate"


def test_gae_with_a_separate_critic_trains_and_resumes_like_an_uninterrupted_run(tmp_path, pm, tiny_config):
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    gae = {"trainer.steps": 2, "trainer.eval_tasks": 0, "algorithm.estimator": "gae",
           "algorithm.critic.enabled": "true", "algorithm.advantage.lam": 0.95}
    model, tokenizer = tiny_chat_model(seed=0)
    train(tiny_config(tmp_path / "full", **gae), plugin_manager=pm, model=model, tokenizer=tokenizer)
    full = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    assert all(x["value_loss"] > 0 and x["critic_grad_norm"] > 0 for x in full)

    model, tokenizer = tiny_chat_model(seed=0)
    cut = tiny_config(tmp_path / "cut", **gae)
    train(cut, plugin_manager=pm, model=model, tokenizer=tokenizer, stop_after=1)
    model, tokenizer = tiny_chat_model(seed=0)
    train(cut, resume=True, plugin_manager=pm, model=model, tokenizer=tokenizer)
    resumed = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    for key in ("value_loss", "pg_loss", "critic_grad_norm", "advantage_abs_mean"):
        assert resumed[-1][key] == pytest.approx(full[-1][key], rel=1e-4, abs=1e-6), key
