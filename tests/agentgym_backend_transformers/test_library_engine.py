"""decode_engine='library': the decode batch on transformers' continuous batching, checked against plain
``generate``, a learner forward and the backend's own engine; the GPU-only parts (CUDA graphs, the 1.5B
shape) are marked ``gpu``."""

from __future__ import annotations

import logging

import pytest
import torch

from agentgym_backend_transformers import TransformersBackend, make_backend
from agentgym_backend_transformers.library_engine import LibraryBatch, library_engine_available
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.testing import check_backend
from agentgym_core.testing.tiny_model import tiny_chat_model

pytestmark = pytest.mark.skipif(not library_engine_available(), reason="transformers without continuous batching")

TEXTS = ("Guess a number.", "Pick a colour, any colour.", "Hi.", "go to red ball 1, pickup key, turn left")


def _lively_model(seed: int = 0):
    """The tiny model with weights large enough that greedy replies vary (the default init repeats one token)."""
    model, tokenizer = tiny_chat_model(seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model, tokenizer


@pytest.fixture(scope="module")
def engines():
    """The same model behind the library engine and the own engine."""
    model, tokenizer = _lively_model()
    library = TransformersBackend(model, tokenizer, decode_engine="library")
    yield library, TransformersBackend(model, tokenizer)
    # Its running thread holds the sampling kernels, a process-wide flag: later tests of this worker see
    # torch's default again only once it stops (test_fast_sampling checks that default).
    library.close()
    assert torch.backends.cuda.cudnn_sdp_enabled()


# The seeded settings both sampling checks run under: plain sampling, and top-k with top-p.
SEEDED_SAMPLING = pytest.mark.parametrize("params", [
    SamplingParams(temperature=1.0, max_new_tokens=12, seed=5),
    SamplingParams(temperature=0.7, top_k=40, top_p=0.9, max_new_tokens=12, seed=6),
], ids=["plain", "top_k_top_p"])


def _prompts(backend):
    return [backend.encode(t) for t in TEXTS]


def _plain_generate(backend, prompt, n):
    out = backend.model.generate(torch.tensor([prompt], device=backend.device), max_new_tokens=n, do_sample=False,
                                 eos_token_id=sorted(backend.eos_token_ids), pad_token_id=backend.pad_token_id)
    return out[0, len(prompt):].tolist()


def test_greedy_replies_are_token_identical_to_plain_generate(engines):
    library, _ = engines
    prompts = _prompts(library)
    samples = library.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=16))
    for prompt, sample in zip(prompts, samples, strict=True):
        assert sample.token_ids == _plain_generate(library, prompt, 16)
    assert len({t for s in samples for t in s.token_ids}) > 20  # replies that could differ, not one repeated token


@SEEDED_SAMPLING
def test_sampling_log_probs_equal_a_learner_forward(engines, params):
    """log_softmax(logits / T) before top-k/top-p, as the own engine records them: within 1e-4 in float32."""
    library, _ = engines
    prompts = _prompts(library)
    samples = library.generate(prompts, params)
    scored = library.score([p + s.token_ids for p, s in zip(prompts, samples, strict=True)],
                           temperature=params.temperature)
    for prompt, sample, row in zip(prompts, samples, scored, strict=True):
        assert max(abs(a - b) for a, b in zip(row[len(prompt):], sample.logprobs, strict=True)) < 1e-4


@SEEDED_SAMPLING
def test_a_seed_draws_the_same_tokens_on_both_engines(engines, params):
    library, own = engines
    prompts = _prompts(library)
    ours, theirs = library.generate(prompts, params), own.generate(prompts, params)
    assert [s.token_ids for s in ours] == [s.token_ids for s in theirs]


def test_a_reply_does_not_depend_on_arrival_order_or_companions(engines):
    """Per-row streams: the same key and turn draw the same tokens however the batch is filled."""
    library, _ = engines
    prompts = _prompts(library)
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=11)

    def run(order, late):
        batch = library.open_batch(params)
        out = {}
        try:
            for k in order:
                batch.add(k, prompts[k], max_new_tokens=10)
            steps = 0
            while batch.active:
                out.update(batch.step())
                steps += 1
                if steps == 3:  # these join while the others decode
                    for k in late:
                        batch.add(k, prompts[k], max_new_tokens=10)
        finally:
            batch.close()
        return {k: s.token_ids for k, s in out.items()}

    together = run([0, 1, 2, 3], [])
    shuffled = run([3, 1], [2, 0])
    alone = run([2], [])
    assert together == shuffled
    assert alone[2] == together[2]


def test_stop_strings_and_token_caps_end_replies_as_on_the_own_engine(engines):
    library, own = engines
    prompts = _prompts(library)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    full = own.generate(prompts[:1], greedy)[0].token_ids
    stop = library.decode(full[4:5]).strip() or library.decode(full[4:5])  # a string the reply reaches at token 5
    params = greedy.model_copy(update={"stop": [stop]})
    ours, theirs = library.generate(prompts, params, max_new_tokens=[16, 3, 16, 5]), \
        own.generate(prompts, params, max_new_tokens=[16, 3, 16, 5])
    assert [(s.token_ids, s.finish_reason) for s in ours] == [(s.token_ids, s.finish_reason) for s in theirs]
    assert ours[0].finish_reason == "stop_string" and len(ours[0].token_ids) <= 5
    assert ours[1].finish_reason == "length" and len(ours[1].token_ids) == 3


def test_the_conformance_checker_passes_and_closes_it_twice():
    model, tokenizer = _lively_model()
    library = TransformersBackend(model, tokenizer, decode_engine="library")
    check_backend(library, close=True)  # its engine thread stops, and a second close() is harmless
    assert library.generate(_prompts(library)[:1], SamplingParams(temperature=0.0, max_new_tokens=4))  # and restarts
    library.close()


def test_no_reply_is_lost_when_a_batch_is_dropped_mid_decoding(engines):
    """A batch closed while decoding (a cancelled rollout) cancels its requests; the next batch gets every
    one of its own replies, exactly once, and none of the dropped batch's."""
    library, _ = engines
    prompts = _prompts(library)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=2)
    dropped = library.open_batch(params)
    for k, p in enumerate(prompts):
        dropped.add(("old", k), p, max_new_tokens=12)
    dropped.step()
    dropped.close()
    assert dropped.active == 0
    batch = library.open_batch(params)
    got = []
    try:
        for k, p in enumerate(prompts * 3):
            batch.add(k, p, max_new_tokens=12)
        while batch.active:
            got.extend(batch.step())
    finally:
        batch.close()
    assert sorted(k for k, _ in got) == list(range(len(prompts) * 3))
    fresh = library.generate(prompts * 3, params)
    assert [s.token_ids for _, s in sorted(got, key=lambda kv: kv[0])] == [s.token_ids for s in fresh]


def test_a_dead_manager_thread_raises_instead_of_hanging(engines):
    library, _ = engines
    batch = library.open_batch(SamplingParams(temperature=0.0, max_new_tokens=4))
    assert isinstance(batch, LibraryBatch)
    try:
        batch.add(0, _prompts(library)[0], max_new_tokens=4)
        library._library.shutdown()  # the thread is gone with a request outstanding
        with pytest.raises(RuntimeError, match="refused|outstanding"):
            for _ in range(100):
                batch.step()
    finally:
        batch.close()


def test_weights_updated_in_place_are_sampled_from_without_a_reload():
    model, tokenizer = _lively_model(seed=1)
    library = make_backend({"decode_engine": "library"}, model=model, tokenizer=tokenizer)
    try:
        long = library.encode(" ".join(TEXTS) * 12)  # longer than a page: later requests share its full pages
        prompts = [long + p for p in _prompts(library)]
        greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
        before = [s.token_ids for s in library.generate(prompts, greedy)]
        manager = library._library.manager
        assert any(a.ledger.hash_to_block for a in manager.batch_processor.cache.cache_allocators.values())
        with torch.no_grad():  # an optimizer step, in place, on the lent module
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.2)
        after = [s.token_ids for s in library.generate(prompts, greedy)]
        assert library._library.manager is manager  # kept: its cache emptied, nothing rebuilt or reloaded
        assert after != before  # no page of the old weights' keys was reused
        assert after == [_plain_generate(library, p, 10) for p in prompts]
    finally:
        library.close()  # its thread holds a process-wide attention flag (the fixture above)


def test_an_unknown_engine_is_refused_with_the_choices():
    model, tokenizer = tiny_chat_model()
    with pytest.raises(ValueError, match="'auto', 'own' or 'library'"):
        TransformersBackend(model, tokenizer, decode_engine="vllm")


def test_the_setup_names_the_engine_and_the_attention_kernel(engines):
    library, own = engines
    assert library.sampling_setup["decode_engine"] == "library"
    assert own.sampling_setup["decode_engine"] == "own"  # auto: the own engine (the faster one on a CPU)
    assert library.sampling_setup["attention_kernel"] == "sdpa"  # no flash kernel on a CPU


# -- on a GPU --------------------------------------------------------------------------------------


def _gpu_library(model, tokenizer, **options):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return make_backend({"decode_engine": "library", **options}, model=model.to("cuda"), tokenizer=tokenizer)


@pytest.mark.gpu
def test_gpu_cuda_graph_replays_give_the_same_replies_twice():
    """The library replays decode steps through CUDA graphs; a stale replay would change the second run."""
    model, tokenizer = _lively_model()
    library = _gpu_library(model, tokenizer)
    library.library_engine_options["use_cuda_graph"] = True  # the library's default needs a flash kernel
    prompts = [library.encode(t) for t in TEXTS] * 8
    params = SamplingParams(temperature=1.0, max_new_tokens=32, seed=4)
    first = [s.token_ids for s in library.generate(prompts, params)]
    second = [s.token_ids for s in library.generate(prompts, params)]
    assert first == second
    assert any(library._library.manager.continuous_batching_config.use_cuda_graph)  # the path under test ran


@pytest.mark.gpu
def test_gpu_real_shape_greedy_matches_generate_and_log_probs_match_a_forward():
    """The 1.5B recipe's shape (random weights, float32, so that kernels differ by rounding only): greedy
    replies equal plain generate's under the same kernel settings; sampled log-probs equal a learner forward
    within TF32's tolerance (0.02 nats)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, tie_word_embeddings=True)
    _, tokenizer = tiny_chat_model()
    config.vocab_size = max(config.vocab_size, len(tokenizer))
    config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    library = _gpu_library(model.eval(), tokenizer)
    prompts = [library.encode(t) for t in TEXTS]
    greedy = library.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=24))
    for prompt, sample in zip(prompts, greedy, strict=True):
        with library.sampling_kernels():
            assert sample.token_ids == _plain_generate(library, prompt, 24)
    params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=1)
    samples = library.generate(prompts, params)
    scored = library.score([p + s.token_ids for p, s in zip(prompts, samples, strict=True)])
    for prompt, sample, row in zip(prompts, samples, scored, strict=True):
        assert max(abs(a - b) for a, b in zip(row[len(prompt):], sample.logprobs, strict=True)) < 0.02


def test_the_start_up_log_line_names_the_attention_kernel(caplog):
    model, tokenizer = tiny_chat_model()
    with caplog.at_level(logging.INFO, logger="agentgym_backend_transformers.backend"):
        TransformersBackend(model, tokenizer, decode_engine="own")
    assert "decode engine own, attention kernel sdpa" in caplog.text
