"""RMS norms and gated MLPs that keep less for the backward pass, with the same forward numbers.

A training forward keeps, for backward, whatever each operation saves. For a Llama-shaped decoder
(Llama, Qwen2/3, Mistral: SmolLM2 is one) two of its parts keep more than their gradients need:

* the RMS norm, written as four tensor operations in transformers, keeps its input *and* its
  normalized output: two float32 copies of the hidden state per norm, two norms a layer, where the
  residual stream is float32 (float32 weights, with or without bf16 autocast). Its gradient needs
  only the input and one float per token (the reciprocal RMS): :class:`_RMSNorm` keeps those.
* the gated MLP, ``down(silu(gate(x)) * up(x))``, keeps ``gate(x)``, ``silu(gate(x))`` and ``up(x)``;
  the middle one is recomputed from the first in backward by :class:`_SiLUGate` (one more silu).

A 1,024-token training forward of SmolLM2-135M under bf16 autocast keeps 1.07 GB instead of 1.31 GB
(0.23 MB a token less). ``bench/sft_memory.py --compare-with "--lean-activations 0"`` measures whole
SFT steps (bench/README.md, "Memory on CPU"); ``model.lean_activations: false`` turns it off. The
forward computes what transformers' code computes, in the same order, so log-probs do not move;
gradients agree to float rounding (tests/agentgym_core/training/test_lean_activations.py).

:func:`keep_fewer_activations` gives the modules it recognises (by class name, and only where their
attributes are the expected ones) a subclass with the lean forward; any other module keeps
transformers' own code, so an architecture it does not know trains as before, with more memory.
Forwards without a graph (rollouts, evaluation) and norms of other dtypes run transformers' code.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["keep_fewer_activations"]

_NORMS = {"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm"}
_GATED_MLPS = {"LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP"}


class _RMSNorm(torch.autograd.Function):
    """``weight * (h * rsqrt(mean(h ** 2) + eps))`` for float32 ``h`` (..., D), keeping ``h`` and the
    reciprocal RMS (..., 1) for backward."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
        ctx.save_for_backward(hidden, weight, rstd)
        return weight * (hidden * rstd)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        hidden, weight, rstd = ctx.saved_tensors
        normed = hidden * rstd  # (..., D), recomputed
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad * normed).reshape(-1, normed.shape[-1]).sum(0).to(weight.dtype)  # (D,)
        grad_hidden = None
        if ctx.needs_input_grad[0]:
            grad_normed = grad * weight  # (..., D)
            # d/dh of h * rstd(h): rstd * (g - normed * mean(g * normed))
            grad_hidden = rstd * (grad_normed - normed * (grad_normed * normed).mean(-1, keepdim=True))
        return grad_hidden, grad_weight, None


class _SiLUGate(torch.autograd.Function):
    """``silu(gate) * up``, keeping ``gate`` and ``up`` (not ``silu(gate)``) for backward."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        gate, up = ctx.saved_tensors
        grad_gate = torch.ops.aten.silu_backward(grad * up, gate) if ctx.needs_input_grad[0] else None
        grad_up = grad * F.silu(gate) if ctx.needs_input_grad[1] else None
        return grad_gate, grad_up


def _keeps_graph(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _lean_norm_forward(self: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    if hidden_states.dtype == torch.float32 and self.weight.dtype == torch.float32 \
            and _keeps_graph(hidden_states, self.weight):
        return _RMSNorm.apply(hidden_states, self.weight, self.variance_epsilon)
    return type(self).__mro__[1].forward(self, hidden_states)  # another dtype, or no backward: transformers'


def _lean_mlp_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    gate, up = self.gate_proj(x), self.up_proj(x)
    if _keeps_graph(gate, up):
        return self.down_proj(_SiLUGate.apply(gate, up))
    return self.down_proj(self.act_fn(gate) * up)


def _is_silu(module: Any) -> bool:
    return isinstance(module, torch.nn.SiLU) or type(module).__name__ == "SiLUActivation"


_LEAN_CLASSES: dict[type, type] = {}


def _lean_class(cls: type, forward: Any) -> type:
    """``cls`` with ``forward``: one subclass per class, under the same name.

    A subclass rather than a forward set on the instance: transformers re-applies its hub-kernel layers
    when the model switches between training and evaluation, which drops an instance's forward and
    falls back to the class's own."""
    if cls not in _LEAN_CLASSES:
        _LEAN_CLASSES[cls] = type(cls.__name__, (cls,), {"forward": forward, "_agentgym_lean": True})
    return _LEAN_CLASSES[cls]


def keep_fewer_activations(model: torch.nn.Module) -> int:
    """Give ``model``'s recognised RMS norms and SiLU-gated MLPs the lean forwards above; returns how
    many modules changed (0 for an architecture it does not know). Calling it again changes nothing."""
    changed = 0
    for module in model.modules():
        cls = type(module)
        if getattr(cls, "_agentgym_lean", False):
            continue
        if cls.__name__ in _NORMS and isinstance(getattr(module, "weight", None), torch.Tensor) \
                and isinstance(getattr(module, "variance_epsilon", None), float):
            module.__class__ = _lean_class(cls, _lean_norm_forward)
            changed += 1
        elif cls.__name__ in _GATED_MLPS and all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj")) \
                and _is_silu(getattr(module, "act_fn", None)):
            module.__class__ = _lean_class(cls, _lean_mlp_forward)
            changed += 1
    return changed
