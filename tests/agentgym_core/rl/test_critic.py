"""rl.critic: GAE's value model, separate or on the policy's trunk."""

from __future__ import annotations

import json

import pytest
import torch

from agentgym_core.rl.config import load_config
from agentgym_core.rl.losses import (
    value_loss,
)


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
    from agentgym_core.rl.forward import forward_tokens
    from agentgym_core.rl.packing_support import installed_version, packing_support_problem
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
