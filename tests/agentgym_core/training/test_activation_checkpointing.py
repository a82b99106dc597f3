"""Checkpointing only forwards above a token threshold: short forwards keep their activations (each
layer runs once), long ones recompute them in backward (twice), the gradients are the same, and the
threshold comes from the model config."""

from __future__ import annotations

import pytest
import torch

from agentgym_core.rl.forward import forward_tokens
from agentgym_core.testing.tiny_model import tiny_chat_model
from agentgym_core.training.activation_checkpointing import checkpoint_only_above, checkpointing_threshold


def _checkpointed_model():
    model, tokenizer = tiny_chat_model(seed=0)
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()
    model.train()
    return model, tokenizer


def _mlp_calls(model, sequences) -> tuple[int, list[torch.Tensor]]:
    """Times the first layer's MLP ran in one forward and backward of ``sequences``; the gradients."""
    calls = []
    mlp = model.model.layers[0].mlp
    plain_forward = mlp.forward

    def counted(*args, **kwargs):  # a wrapper, not a forward hook: torch's recompute skips module hooks
        calls.append(1)
        return plain_forward(*args, **kwargs)

    mlp.forward = counted
    width = max(len(s) for s in sequences)
    mask = torch.zeros(len(sequences), width)
    for i, s in enumerate(sequences):
        mask[i, 1: len(s)] = 1
    try:
        stats = forward_tokens(model, sequences, mask, max_tokens=64)
        (-(stats.logprobs * mask).sum()).backward()
    finally:
        del mlp.forward  # back to the class's method
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return len(calls), grads


def test_short_forwards_keep_activations_and_long_ones_recompute():
    model, _ = _checkpointed_model()
    g = torch.Generator().manual_seed(0)
    short = [torch.randint(3, 300, (n,), generator=g).tolist() for n in (10, 12)]  # packed: one 22-token row
    long = [torch.randint(3, 300, (40,), generator=g).tolist()]

    flags_before = [m.gradient_checkpointing for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    assert _mlp_calls(model, short)[0] == 2  # checkpointed everywhere (no threshold): recomputed in backward
    checkpoint_only_above(model, 30)
    assert checkpointing_threshold(model) == 30
    calls_short, grads_kept = _mlp_calls(model, short)
    assert calls_short == 1  # 22 tokens <= 30: the activations were kept
    assert _mlp_calls(model, long)[0] == 2  # 40 tokens > 30: still checkpointed
    flags = [m.gradient_checkpointing for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    assert flags == flags_before and all(flags)  # every flag restored after the short forward

    checkpoint_only_above(model, None)
    calls, grads_recomputed = _mlp_calls(model, short)
    assert calls == 2
    assert len(grads_kept) == len(grads_recomputed)
    for a, b in zip(grads_kept, grads_recomputed, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_flags_come_back_when_the_forward_fails():
    model, _ = _checkpointed_model()
    checkpoint_only_above(model, 1000)
    before = [m.gradient_checkpointing for m in model.modules() if hasattr(m, "gradient_checkpointing")]

    def fail(*_):
        raise RuntimeError("boom")

    handle = model.model.layers[0].register_forward_pre_hook(fail)
    with pytest.raises(RuntimeError, match="boom"):
        forward_tokens(model, [[5, 6, 7, 8]], torch.ones(1, 4))
    handle.remove()
    after = [m.gradient_checkpointing for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    assert after == before
    with pytest.raises(ValueError, match="positive"):
        checkpoint_only_above(model, 0)


def test_model_config_sets_the_threshold_and_refuses_it_without_checkpointing(tmp_path):
    from pydantic import ValidationError

    from agentgym_core.rl.config import ModelConfig
    from agentgym_core.rl.policy import load_policy

    with pytest.raises(ValidationError, match="model.gradient_checkpointing: true"):
        ModelConfig(gradient_checkpointing_above_tokens=512)
    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, _ = load_policy(ModelConfig(path=str(tmp_path), gradient_checkpointing=True,
                                        gradient_checkpointing_above_tokens=512))
    assert checkpointing_threshold(loaded) == 512
    plain, _ = load_policy(ModelConfig(path=str(tmp_path), gradient_checkpointing=True))
    assert checkpointing_threshold(plain) is None
