"""GrowingLayer: the same keys and values as transformers' DynamicLayer, written in place."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from agentgym_backend_transformers.kv_cache import HEADROOM, GrowingLayer, fill_holes, growing_cache
from agentgym_core.rollout import SamplingParams


def _kv(batch: int, columns: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 2, columns, 4, generator=g), torch.randn(batch, 2, columns, 4, generator=g)


def test_appends_like_dynamic_layer_and_in_place_within_headroom():
    growing, dynamic = GrowingLayer(), DynamicLayer()
    for step, columns in enumerate([5, 1, 1, 3]):
        k, v = _kv(3, columns, seed=step)
        got, want = growing.update(k, v), dynamic.update(k, v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        if step == 0:
            start = growing.keys.data_ptr()
        assert growing.keys.data_ptr() == start  # never reallocated: 10 columns fit in the headroom
    assert growing.get_seq_length() == 10 and growing.capacity == (3, HEADROOM + 5 + HEADROOM)


def test_reallocates_when_the_spare_columns_run_out():
    growing, dynamic = GrowingLayer(), DynamicLayer()
    for step, columns in enumerate([HEADROOM - 1, 1, 1, 2 * HEADROOM]):
        k, v = _kv(2, columns, seed=step)
        got, want = growing.update(k, v), dynamic.update(k, v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert growing.capacity[1] >= growing.get_seq_length() == 3 * HEADROOM + 1


def test_contents_replaced_from_outside_are_taken_over():
    growing, dynamic = GrowingLayer(), DynamicLayer()
    k, v = _kv(4, 6, seed=0)
    growing.update(k, v)
    dynamic.update(k, v)
    index = torch.tensor([3, 1])  # what the decode batch does when rows leave: gather + trim
    growing.keys, growing.values = growing.keys[index, :, 2:], growing.values[index, :, 2:]
    dynamic.keys, dynamic.values = dynamic.keys[index, :, 2:], dynamic.values[index, :, 2:]
    k, v = _kv(2, 1, seed=1)
    got, want = growing.update(k, v), dynamic.update(k, v)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[0].shape == (2, 2, 5, 4)


def test_reserve_gives_zeros_that_become_the_contents_and_crop_keeps_writing_in_place():
    layer = GrowingLayer()
    like, _ = _kv(1, 1, seed=0)
    keys, values = layer.reserve(like, 3, 7)
    assert keys.shape == values.shape == (3, 2, 7, 4) and not keys.any() and not values.any()
    keys[1, :, 4:] = 1.0
    k, v = _kv(3, 1, seed=1)
    out_k, _ = layer.update(k, v)
    assert out_k.shape[-2] == 8 and torch.equal(out_k[1, :, 4:7], torch.ones(2, 3, 4))
    layer.crop(-2)
    out_k, _ = layer.update(k, v)
    assert out_k.shape[-2] == 7 and torch.equal(out_k[:, :, -1], k[:, :, 0])
    assert out_k.data_ptr() == keys.data_ptr()


def test_growing_cache_refuses_sliding_window_models():
    from transformers import MistralConfig

    config = MistralConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1,
                           num_hidden_layers=2, sliding_window=8, vocab_size=50)
    with pytest.raises(ValueError, match="sliding"):
        growing_cache(config)


def test_model_forward_over_a_growing_cache_matches_dynamic_cache(tiny_backend):
    from transformers import DynamicCache

    model = tiny_backend.model
    prompt = torch.tensor([[5, 9, 23, 41, 7, 12, 99, 3]])
    outputs = []
    for cache in (DynamicCache(config=model.config), growing_cache(model.config)):
        with torch.inference_mode():
            logits = [model(input_ids=prompt, past_key_values=cache, use_cache=True).logits[:, -1]]
            for step in range(4):
                token = logits[-1].argmax(-1, keepdim=True)
                logits.append(model(input_ids=token, position_ids=torch.tensor([[8 + step]]),
                                    past_key_values=cache, use_cache=True).logits[:, -1])
        outputs.append(torch.cat(logits))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)


def test_decode_steps_of_the_batch_write_the_cache_in_place(tiny_backend):
    batch = tiny_backend.open_batch(SamplingParams(temperature=1.0, max_new_tokens=8, seed=3))
    batch.add(0, [5, 9, 23, 41, 7], max_new_tokens=8)
    batch.add(1, [5, 9, 23, 60, 61, 62, 63], max_new_tokens=8)
    done = batch.step()  # admits both rows (per-row prefill, laid into one buffer), samples one token each
    assert not done and isinstance(batch._cache.layers[0], GrowingLayer)
    pointers = []
    while batch.active == 2:
        pointers.append(batch._cache.layers[0].keys.data_ptr())
        batch.step()
    assert len(pointers) >= 3 and len(set(pointers)) == 1  # until a row left, every step wrote into one buffer
    batch.close()


def test_rows_join_and_leave_in_place_keeping_every_rows_contents():
    """What the decode batch does between steps: each row's real columns (right-aligned; the rest is
    padding the attention mask hides) stay exactly its keys and values; decode steps and rows
    leaving never reallocate, and the buffer never holds more than max_rows rows."""
    layer = GrowingLayer(max_rows=8)
    k, v = _kv(3, 10, seed=0)
    layer.update(k, v)
    rows = [(k[b], v[b]) for b in range(3)]  # reference: each row's real keys and values, (heads, n, dim)

    def check() -> None:
        assert layer.keys.shape[0] == len(rows)
        for b, (rk, rv) in enumerate(rows):
            n = rk.shape[1]
            assert torch.equal(layer.keys[b, :, -n:], rk) and torch.equal(layer.values[b, :, -n:], rv)

    for step, (joining, width) in enumerate([(2, 6), (1, 14), (2, 4)]):  # narrower, wider, narrower newcomers
        nk, nv = _kv(joining, width, seed=10 + step)
        layer.append_rows(nk, nv)
        rows += [(nk[b], nv[b]) for b in range(joining)]
        assert layer.keys.shape[2] == max(r[0].shape[1] for r in rows)
        check()
        assert layer.capacity[0] <= 8
        dk, dv = _kv(len(rows), 1, seed=20 + step)  # a decode step
        pointer = layer._k.data_ptr()
        layer.update(dk, dv)
        assert layer._k.data_ptr() == pointer
        rows = [(torch.cat([rk, dk[b]], dim=1), torch.cat([rv, dv[b]], dim=1)) for b, (rk, rv) in enumerate(rows)]
        check()
    keep = [0, 2, 5, 7]
    order = fill_holes(keep)
    assert order == [0, 5, 2, 7]  # row 5 fills the hole at 1; 7 fills 3 (its own place)
    drop = layer.keys.shape[2] - max(rows[b][0].shape[1] for b in keep)  # padding in every kept row
    pointer = layer._k.data_ptr()
    layer.keep_rows(order, drop)
    rows = [rows[b] for b in order]
    check()
    dk, dv = _kv(4, 1, seed=30)
    layer.update(dk, dv)
    rows = [(torch.cat([rk, dk[b]], dim=1), torch.cat([rv, dv[b]], dim=1)) for b, (rk, rv) in enumerate(rows)]
    check()
    assert layer._k.data_ptr() == pointer


def test_fill_holes_moves_only_rows_from_the_end():
    assert fill_holes([0, 1, 2]) == [0, 1, 2]
    assert fill_holes([1, 2, 3]) == [3, 1, 2]
    assert fill_holes([0, 4]) == [0, 4]
    assert fill_holes([0, 2, 5, 7]) == [0, 5, 2, 7]
    assert fill_holes([]) == []


def test_a_batch_reused_after_emptying_samples_what_a_fresh_batch_samples(tiny_backend):
    """The batch keeps its buffers while empty between turns; what the last rows left there (stale
    keys and values in padding columns and spare rows) must not change the next rows' samples."""
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=5)
    first = {0: [5, 9, 23, 41, 7, 8, 9, 10, 11, 12, 13, 14], 1: [5, 9, 60]}
    second = {2: [5, 9, 23], 3: [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]}

    def run(batch, prompts):
        for key, prompt in prompts.items():
            batch.add(key, prompt, max_new_tokens=6)
        out = {}
        while batch.active:
            out.update(batch.step())
        return out

    reused = tiny_backend.open_batch(params)
    run(reused, first)
    assert isinstance(reused._cache.layers[0], GrowingLayer) and reused._cache.layers[0].capacity[0] >= 2
    again = run(reused, second)
    fresh = run(tiny_backend.open_batch(params), second)
    for key in second:
        assert again[key].token_ids == fresh[key].token_ids
        assert again[key].logprobs == pytest.approx(fresh[key].logprobs, abs=1e-5)
