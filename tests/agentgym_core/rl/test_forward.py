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


def test_token_logprobs_match_log_softmax_in_value_and_gradient_and_keep_no_float_copy():
    from agentgym_core.rl.forward import token_logprobs

    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for temperature in (1.0, 0.7):
            logits = (3 * torch.randn(37, 301, generator=g)).to(dtype).requires_grad_()
            tokens = torch.randint(0, 301, (37,), generator=g)
            weights = torch.randn(37, generator=g)
            saved: list[torch.Tensor] = []
            with torch.autograd.graph.saved_tensors_hooks(lambda t, saved=saved: saved.append(t) or t, lambda t: t):
                got = token_logprobs(logits, tokens, temperature)
            (got * weights).sum().backward()
            got_grad, logits.grad = logits.grad, None
            want = torch.log_softmax(logits.float() / temperature, -1).gather(-1, tokens[:, None]).squeeze(-1)
            (want * weights).sum().backward()
            assert got.dtype == torch.float32
            assert torch.allclose(got, want, atol=1e-5)
            assert torch.allclose(got_grad.float(), logits.grad.float(), atol=1e-5)
            # What backward keeps: the logits as given (no float32 (n, V) copy) and a float per row.
            assert sum(t.numel() * t.element_size() for t in saved) <= logits.numel() * logits.element_size() + 37 * 16
    with torch.no_grad():  # without a graph: the same numbers
        logits = torch.randn(4, 9, generator=g)
        tokens = torch.tensor([0, 3, 8, 1])
        want = torch.log_softmax(logits / 2.0, -1).gather(-1, tokens[:, None]).squeeze(-1)
        assert torch.allclose(token_logprobs(logits, tokens, 2.0), want, atol=1e-6)


def test_forward_tokens_gradients_match_a_plain_forward():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (12, 7, 20, 5)]
    mask = torch.zeros(4, 20)
    for i, s in enumerate(seqs):
        mask[i, 2: len(s)] = (torch.rand(len(s) - 2, generator=g) > 0.3).float()  # turns with gaps between them
    weights = torch.randn(4, 20, generator=g)
    grads = []
    for layout in ("packed", "padded", "plain"):
        model, _ = tiny_chat_model(seed=0)
        if layout == "plain":
            loss = torch.zeros(())
            for i, s in enumerate(seqs):
                ids = torch.tensor([s])
                lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float() / 0.9, -1)
                lp = lp.gather(-1, ids[0, 1:, None]).squeeze(-1)
                loss = loss + (lp * mask[i, 1: len(s)] * weights[i, 1: len(s)]).sum()
        else:
            stats = forward_tokens(model, seqs, mask, packing=layout == "packed", max_tokens=40, temperature=0.9)
            loss = (stats.logprobs * weights).sum()
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[2], atol=1e-4) and torch.allclose(grads[1], grads[2], atol=1e-4)
