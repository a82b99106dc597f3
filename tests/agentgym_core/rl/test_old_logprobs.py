"""algorithm.old_logprobs: the update's own log-probs stand in for a scoring pass only where that is exact."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from agentgym_core.rl.config import AlgorithmConfig
from agentgym_core.rl.forward import forward_tokens
from agentgym_core.rl.trainer import train
from agentgym_core.rl.update import UpdateInputs, ppo_update


def test_auto_skips_the_scoring_pass_only_with_one_optimizer_step_and_no_critic_or_kl():
    no_kl = {"kl": {"coef": 0.0}}
    assert not AlgorithmConfig(**no_kl).recomputes_old_logprobs  # GRPO, one epoch, one mini-batch, no KL
    assert AlgorithmConfig().recomputes_old_logprobs  # the default KL term needs the scoring pass
    assert AlgorithmConfig(ppo_epochs=2, **no_kl).recomputes_old_logprobs
    assert AlgorithmConfig(mini_batches=2, **no_kl).recomputes_old_logprobs
    assert AlgorithmConfig(estimator="gae", critic={"enabled": True}, **no_kl).recomputes_old_logprobs
    assert AlgorithmConfig(old_logprobs="recompute", **no_kl).recomputes_old_logprobs
    assert not AlgorithmConfig(old_logprobs="current", **no_kl).recomputes_old_logprobs


@pytest.mark.parametrize("bad", [{"ppo_epochs": 2}, {"mini_batches": 4}, {"kl": {"coef": 0.1}},
                                 {"estimator": "gae", "critic": {"enabled": True}}])
def test_current_is_refused_where_it_would_not_be_exact(bad):
    with pytest.raises(ValueError, match="old_logprobs=recompute"):
        AlgorithmConfig(old_logprobs="current", **{"kl": {"coef": 0.0}, **bad})


def _batch(vocab: int, seed: int) -> tuple[list[list[int]], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = [40, 27, 33]
    seqs = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
    mask = torch.zeros(len(seqs), max(lengths))
    for i, n in enumerate(lengths):
        mask[i, 10:n] = 1.0  # a prompt of 10 tokens, then the sampled ones
    return seqs, mask


def test_one_step_with_the_current_log_probs_equals_one_step_with_a_scoring_pass():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=3)
    seqs, mask = _batch(model.config.vocab_size, seed=0)
    advantages = torch.tensor([[1.0], [-0.5], [0.25]]).expand_as(mask) * mask
    config = AlgorithmConfig(micro_batch_tokens=64, loss_agg="seq_mean_token_mean", kl={"coef": 0.0})
    results = {}
    for mode in ("recompute", "current"):
        m = copy.deepcopy(model)
        optimizer = torch.optim.AdamW(m.parameters(), lr=1e-2)
        old = None
        if mode == "recompute":
            with torch.no_grad():
                old = forward_tokens(m, seqs, mask, max_tokens=64, packing=False).logprobs
        rollout = torch.full_like(mask, -3.0) * mask
        inputs = UpdateInputs(sequences=seqs, mask=mask, advantages=advantages, returns=torch.zeros_like(mask),
                              old_logprobs=old, rollout_logprobs=rollout if old is None else None)
        metrics = ppo_update(m, optimizer, inputs, config, temperature=1.0, generator=torch.Generator().manual_seed(0))
        results[mode] = (metrics, [p.detach().clone() for p in m.parameters()])
        if mode == "recompute":
            reference_old = old
    (m_re, p_re), (m_cur, p_cur) = results["recompute"], results["current"]
    assert m_cur["pg_loss"] == pytest.approx(m_re["pg_loss"], abs=1e-6)
    assert m_cur["clip_frac"] == 0.0
    moved = sum(float((a - b).abs().sum()) for a, b in zip(p_re, [p.detach() for p in model.parameters()], strict=True))
    assert moved > 0  # the step did something ...
    for a, b in zip(p_re, p_cur, strict=True):  # ... and the same thing both ways
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    # The metrics the scoring pass would have given, over the trained tokens.
    expected_gap = float(((reference_old - (-3.0)).abs() * mask).sum() / mask.sum())
    assert m_cur["rollout_logprob_gap"] == pytest.approx(expected_gap, rel=1e-5)
    assert m_cur["entropy"] > 0 and "entropy" not in m_re


def test_ppo_update_refuses_missing_old_log_probs_with_several_optimizer_steps():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=3)
    seqs, mask = _batch(model.config.vocab_size, seed=1)
    inputs = UpdateInputs(sequences=seqs, mask=mask, advantages=mask.clone(), returns=torch.zeros_like(mask),
                          old_logprobs=None)
    config = AlgorithmConfig(ppo_epochs=2, old_logprobs="recompute")
    with pytest.raises(ValueError, match="one optimizer step"):
        ppo_update(model, torch.optim.AdamW(model.parameters()), inputs, config, temperature=1.0,
                   generator=torch.Generator().manual_seed(0))


def test_training_runs_agree_with_and_without_the_scoring_pass(tmp_path, pm, tiny_config):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    lines = {}
    for mode in ("recompute", "current"):
        model, tokenizer = tiny_chat_model(seed=1)
        config = tiny_config(tmp_path / mode, **{"trainer.steps": 2, "trainer.eval_tasks": 0,
                                                 "algorithm.old_logprobs": mode, "algorithm.kl.coef": 0.0})
        train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
        lines[mode] = [json.loads(x) for x in (tmp_path / mode / "metrics.jsonl").read_text().splitlines()]
        trajectories = sorted((tmp_path / mode / "trajectories").glob("*.jsonl"))
        lines[mode + "/tokens"] = [[json.loads(x)["token_ids"] for x in p.read_text().splitlines()]
                                   for p in trajectories]
    assert lines["recompute/tokens"] == lines["current/tokens"]  # the same samples at step 2: the same weights
    for re_line, cur_line in zip(lines["recompute"], lines["current"], strict=True):
        assert cur_line["pg_loss"] == pytest.approx(re_line["pg_loss"], abs=1e-5)
        assert cur_line["grad_norm"] == pytest.approx(re_line["grad_norm"], rel=1e-4)
        # The scoring pass's metrics are reported either way (entropy over the trained tokens here, all of them there).
        assert cur_line["entropy"] > 0 and re_line["entropy"] > 0
        assert cur_line["rollout_logprob_gap"] == pytest.approx(re_line["rollout_logprob_gap"], abs=0.05)
