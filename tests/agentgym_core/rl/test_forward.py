"""Packed and padded forwards give the per-token numbers of a plain one-sequence forward."""

from __future__ import annotations

import torch

from agentgym_core.rl.critic import ValueHead
from agentgym_core.rl.forward import forward_tokens, pack_bins


def test_pack_bins_first_fit_decreasing():
    assert pack_bins([5, 3, 2, 4], 7) == [[0, 2], [3, 1]]
    assert pack_bins([9, 2], 7) == [[0], [1]]  # too long: a bin of its own, never cut


def test_packed_and_padded_match_plain_forward():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (12, 7, 20, 5, 9)]
    mask = torch.zeros(5, 20)
    for i, s in enumerate(seqs):
        mask[i, 2: len(s)] = (torch.rand(len(s) - 2, generator=g) > 0.3).float()
    head = ValueHead(64)
    torch.nn.init.normal_(head.proj.weight)
    with torch.no_grad():
        packed = forward_tokens(model, seqs, mask, packing=True, max_tokens=60, with_entropy=True, value_head=head)
        padded = forward_tokens(model, seqs, mask, packing=False, max_tokens=60, with_entropy=True, value_head=head)
        plain = torch.zeros(5, 20)
        for i, s in enumerate(seqs):
            ids = torch.tensor([s])
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            plain[i, 1: len(s)] = lp * mask[i, 1: len(s)]
    assert torch.allclose(packed.logprobs, plain, atol=1e-5)
    assert torch.allclose(padded.logprobs, plain, atol=1e-5)
    assert torch.allclose(packed.entropy, padded.entropy, atol=1e-5)
    assert torch.allclose(packed.values, padded.values, atol=1e-5)
    assert (packed.logprobs[mask == 0] == 0).all()


def test_mixed_precision_modes_and_bf16_forward_close_to_float32():
    import pytest

    from agentgym_core.rl.forward import mixed_precision
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    seqs = [list(range(3, 40)), list(range(50, 70))]
    mask = torch.zeros(2, 37)
    mask[0, 20:37] = 1
    mask[1, 5:20] = 1
    with torch.no_grad():
        with mixed_precision("no", model):
            assert not torch.is_autocast_enabled("cpu")
            full = forward_tokens(model, seqs, mask).logprobs
        with mixed_precision("bf16", model):
            assert torch.is_autocast_enabled("cpu")
            half = forward_tokens(model, seqs, mask).logprobs
        with mixed_precision("auto", model):  # on CPU: on exactly when the CPU has native bf16
            assert torch.is_autocast_enabled("cpu") == torch.cpu._is_avx512_bf16_supported()
    assert half.dtype == torch.float32  # log-probs come back in float32 either way
    assert not torch.equal(half, full)  # bf16 really ran ...
    assert torch.allclose(half, full, atol=0.1)  # ... and stays close (tiny model: logits near 0)
    with pytest.raises(ValueError, match="no, bf16 or auto"):
        mixed_precision("fp8", model)
