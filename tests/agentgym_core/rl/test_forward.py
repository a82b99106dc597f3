"""Packed and padded forwards give the per-token numbers of a plain one-sequence forward."""

from __future__ import annotations

import torch

from agentgym_core.rl.forward import ValueHead, forward_tokens, pack_bins


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
