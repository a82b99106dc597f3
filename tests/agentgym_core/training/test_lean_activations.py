"""Lean RMS norms and gated MLPs: transformers' forward numbers, its gradients, less kept for backward."""

from __future__ import annotations

import copy

import pytest
import torch

from agentgym_core.rl.forward import mixed_precision
from agentgym_core.training.lean_activations import keep_fewer_activations


def _tiny(architecture: str) -> torch.nn.Module:
    import transformers

    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
    }[architecture]
    if architecture == "gpt2":
        config = config_class(vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    else:
        config = config_class(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return model_class(config)


def _run(model: torch.nn.Module, ids: torch.Tensor, autocast: str) -> tuple[torch.Tensor, list[torch.Tensor], int]:
    """Logits, parameter gradients and the bytes autograd kept for backward (distinct storages, weights not
    counted) of one training forward and backward."""
    model.train()
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with mixed_precision(autocast, model, cache=False), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=ids).logits
    (logits.float() * torch.linspace(-1, 1, logits.shape[-1])).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return logits.detach(), grads, sum(kept.values())


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
@pytest.mark.parametrize("autocast", ["no", "bf16"])
def test_lean_forward_is_transformers_forward_with_its_gradients_and_keeps_less(architecture, autocast):
    plain = _tiny(architecture)
    lean = copy.deepcopy(plain)
    assert keep_fewer_activations(lean) == 2 * 2 + 1 + 2  # two norms a layer, the final one, one MLP a layer
    ids = torch.randint(0, 97, (2, 48), generator=torch.Generator().manual_seed(1))
    want_logits, want_grads, want_kept = _run(plain, ids, autocast)
    got_logits, got_grads, got_kept = _run(lean, ids, autocast)
    assert torch.equal(got_logits, want_logits)  # the same operations in the same order
    # Gradients agree to the rounding of the precision the backward runs in (bfloat16: 8 mantissa bits,
    # where one rounding that goes the other way moves a gradient by a few parts in a thousand).
    tolerance = 1e-2 if autocast == "bf16" else 1e-5
    for got, want in zip(got_grads, want_grads, strict=True):
        assert (got - want).norm() <= tolerance * want.norm() + 1e-12
    # Per layer: 2 norms x 1 float32 (B, T, D) copy less, and one (B, T, intermediate) tensor less in the MLP.
    B, T, D, inter = 2, 48, 32, 64
    mlp_bytes = 2 if autocast == "bf16" else 4
    assert want_kept - got_kept >= 2 * (2 * B * T * D * 4 + B * T * inter * mlp_bytes)


def test_lean_forwards_survive_train_and_eval_and_stay_out_of_no_grad_forwards():
    model = _tiny("llama")
    if hasattr(model, "set_use_kernels"):  # as from_pretrained does by default in transformers 5 (offline: its own code)
        model.set_use_kernels(True)
    keep_fewer_activations(model)
    assert keep_fewer_activations(model) == 0  # a second call changes nothing
    for mode in (True, False, True):  # transformers re-applies its hub-kernel layers on a mode switch
        model.train(mode)
        hidden = torch.randn(1, 5, 32, requires_grad=True)
        assert type(model.model.norm(hidden).grad_fn).__name__ == "_RMSNormBackward"
        assert type(model.model.norm).__name__ == "LlamaRMSNorm"  # the same name, for anything that looks
    with torch.no_grad():
        ids = torch.randint(0, 97, (1, 9))
        assert torch.equal(model(input_ids=ids).logits, _tiny("llama")(input_ids=ids).logits)


def test_an_architecture_it_does_not_know_is_left_as_it_is():
    model = _tiny("gpt2")
    assert keep_fewer_activations(model) == 0
    assert all(not getattr(type(m), "_agentgym_lean", False) for m in model.modules())


def test_load_policy_applies_it_unless_the_recipe_says_no(tmp_path):
    from agentgym_core.rl.config import ModelConfig
    from agentgym_core.rl.policy import load_policy
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    lean, _ = load_policy(ModelConfig(path=str(tmp_path)))
    plain, _ = load_policy(ModelConfig(path=str(tmp_path), lean_activations=False))
    assert getattr(type(lean.model.norm), "_agentgym_lean", False)
    assert not getattr(type(plain.model.norm), "_agentgym_lean", False)
