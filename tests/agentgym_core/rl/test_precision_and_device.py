"""Master weights, and the learner on CUDA (tests marked ``gpu`` skip without a CUDA device)."""

from __future__ import annotations

import warnings

import pytest
import torch

from agentgym_core.rl.config import load_config
from agentgym_core.rl.learner import Learner, master_weights


def _config(*overrides: str):
    return load_config(None, ["envs=[{name: word}]", "trainer.progress=false", *overrides])


def test_bf16_weights_become_float32_masters():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    model.to(torch.bfloat16)
    learner = Learner(_config("algorithm.kl.coef=0.01"), model)
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}
    assert all(p.dtype == torch.float32 for group in learner.optimizer.param_groups for p in group["params"])


def test_the_kl_reference_keeps_bf16_linear_weights_under_bf16_autocast_and_scores_exactly_the_same():
    """Autocast casts every linear weight to bf16 anyway: the frozen reference stores them so (half their
    bytes) and its log-probs are bit-identical to a float32 copy's; the tied embeddings stay float32."""
    import copy

    from agentgym_core.rl.batch import RLBatch
    from agentgym_core.rl.forward import forward_tokens, mixed_precision
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    initial = copy.deepcopy(model)
    learner = Learner(_config("algorithm.kl.coef=0.01", "model.mixed_precision=bf16"), model)
    ref = learner.reference
    assert ref.lm_head.weight is ref.model.embed_tokens.weight and ref.lm_head.weight.dtype == torch.float32
    assert {m.weight.dtype for m in ref.modules() if isinstance(m, torch.nn.Linear) and m is not ref.lm_head} \
        == {torch.bfloat16}
    nbytes = lambda m: sum(p.numel() * p.element_size() for p in m.parameters())  # noqa: E731
    assert nbytes(ref) < 0.8 * nbytes(learner.model)

    g = torch.Generator().manual_seed(0)
    sequences = [torch.randint(0, 100, (n,), generator=g).tolist() for n in (30, 18)]
    mask = torch.zeros(2, 30)
    mask[0, 10:30], mask[1, 5:18] = 1, 1
    batch = RLBatch(trajectories=[], sequences=sequences, mask=mask, token_rewards=torch.zeros(2, 30),
                    rollout_logprobs=torch.zeros(2, 30), group_ids=torch.zeros(2), turn_spans=[[], []],
                    turn_states=[[], []])
    scored = learner.score(batch, temperature=1.0)
    with torch.no_grad(), mixed_precision("bf16", initial):
        want = forward_tokens(initial, sequences, mask).logprobs
    assert torch.equal(scored.ref_logprobs, want)
    assert torch.equal(scored.token_kl, torch.zeros_like(scored.token_kl))  # policy == reference before training
    plain = Learner(_config("algorithm.kl.coef=0.01", "model.mixed_precision='no'"), copy.deepcopy(initial))
    assert {p.dtype for p in plain.reference.parameters()} == {torch.float32}  # float32 matmuls: no narrowing


def test_bf16_optimizer_weights_only_when_asked_by_name_and_with_a_warning():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    model.to(torch.bfloat16)
    with pytest.warns(UserWarning, match="low_precision_params"):
        master_weights(model, _config("optim.low_precision_params=true"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        master_weights(model, _config())  # the default: silently float32
    assert {p.dtype for p in model.parameters()} == {torch.float32}


@pytest.mark.gpu
def test_rl_step_on_cuda(tmp_path):
    """One RL step with the model and every batch tensor on CUDA (the SFT step: finetune/test_sft.py)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from learner_ranks import run, train_lines

    run(str(tmp_path / "run"), ["trainer.steps=1", "model.device=cuda"])
    line = train_lines(tmp_path / "run")[0]
    assert line["sampled_tokens"] > 0
    assert 0 < line["peak_gpu_rollout_gb"] < 1 and 0 < line["peak_gpu_update_gb"] < 1  # a tiny model's phases
    assert 0 < line["peak_gpu_allocated_update_gb"] <= line["peak_gpu_update_gb"]  # tensors within what is reserved


@pytest.mark.gpu
def test_qwen2_5_1_5b_config_trains_one_bf16_mixed_precision_step_with_float32_masters():
    """A randomly initialised model of Qwen2.5-1.5B's shape (no hub on the GPU machine): one update."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from transformers import AutoModelForCausalLM, Qwen2Config

    from agentgym_core.rl.update import UpdateInputs

    config = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                         tie_word_embeddings=True, rope_theta=1e6)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).cuda()
    learner = Learner(_config("model.mixed_precision=bf16", "algorithm.kl.coef=0", "optim.lr=1e-5"), model)
    assert {p.dtype for p in learner.model.parameters()} == {torch.float32}
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters() if "layers.0." in n}
    T = 256
    seqs = [torch.randint(0, 151936, (T,)).tolist() for _ in range(4)]
    mask = torch.zeros(4, T, device="cuda")
    mask[:, T // 2:] = 1
    inputs = UpdateInputs(sequences=seqs, mask=mask, advantages=torch.randn(4, 1, device="cuda").expand(4, T) * mask,
                          returns=torch.zeros(4, T, device="cuda"), old_logprobs=torch.full((4, T), -12.0, device="cuda"))
    metrics = learner.update(inputs, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert metrics["grad_norm"] > 0
    after = dict(learner.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)
    print(f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


def test_log_probs_and_entropy_in_chunks_equal_one_pass(monkeypatch):
    """Chunking the float log-softmax over response positions changes no number."""
    import agentgym_core.rl.forward as forward
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    seqs = [[1, 5, 9, 13, 17, 21, 25, 29], [2, 4, 6, 8, 10]]
    mask = torch.zeros(2, 8)
    mask[0, 2:] = 1
    mask[1, 1:5] = 1
    with torch.no_grad():
        whole = forward.forward_tokens(model, seqs, mask, with_entropy=True, temperature=0.7)
        monkeypatch.setattr(forward, "LOGIT_CHUNK", 2)
        chunked = forward.forward_tokens(model, seqs, mask, with_entropy=True, temperature=0.7)
    torch.testing.assert_close(chunked.logprobs, whole.logprobs, rtol=0, atol=1e-6)
    torch.testing.assert_close(chunked.entropy, whole.entropy, rtol=0, atol=1e-6)
    assert bool((whole.logprobs[mask > 0] < 0).all())


def test_gradient_checkpointing_is_switched_on_and_keeps_the_numbers(tmp_path):
    """model.gradient_checkpointing (the CPU recipes' memory setting) recomputes activations: same gradients."""
    from agentgym_core.rl.config import ModelConfig
    from agentgym_core.rl.forward import forward_tokens
    from agentgym_core.rl.policy import load_policy
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    grads = []
    for on in (False, True):
        loaded, _ = load_policy(ModelConfig(path=str(tmp_path), gradient_checkpointing=on))
        assert getattr(loaded, "is_activation_checkpointing", None) is on or loaded.is_gradient_checkpointing is on
        loaded.train()
        seqs = [[1, 5, 7, 9, 11, 3], [2, 4, 6, 8]]
        mask = torch.tensor([[0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 0, 0]], dtype=torch.float32)
        stats = forward_tokens(loaded, seqs, mask)
        (-(stats.logprobs * mask).sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in loaded.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


def test_model_autocast_cache_false_casts_anew_at_every_use_and_gives_the_same_gradients():
    """runtime.autocast_cache reaches the learner's autocast context; without the cache every use of a
    weight is cast again, which rounds the same way, so the loss and the gradients are bit-identical."""
    from agentgym_core.rl.forward import forward_tokens, mixed_precision
    from agentgym_core.testing.tiny_model import tiny_chat_model

    cached = Learner(_config("model.mixed_precision=bf16"), tiny_chat_model(seed=0)[0])
    uncached = Learner(_config("model.mixed_precision=bf16", "runtime.autocast_cache=false"), tiny_chat_model(seed=0)[0])
    flags = []
    for learner in (cached, uncached):
        with learner.precision:
            flags.append((torch.is_autocast_enabled("cpu"), torch.is_autocast_cache_enabled()))
    assert flags == [(True, True), (True, False)]

    g = torch.Generator().manual_seed(0)
    sequences = [torch.randint(0, 100, (n,), generator=g).tolist() for n in (30, 18)]
    mask = torch.zeros(2, 30)
    mask[0, 10:30], mask[1, 5:18] = 1, 1
    grads = []
    for learner, cache in ((cached, True), (uncached, False)):
        model = learner.model
        with mixed_precision("bf16", model, cache=cache):
            for _ in range(2):  # two micro-batches: the second reuses the cached casts, or casts again
                forward_tokens(model, sequences, mask).logprobs.sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
