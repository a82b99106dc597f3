"""The critic GAE needs: a value head on the policy's trunk, or a model of its own.

Two kinds (``algorithm.critic.kind``):

* ``separate`` (the default): its own transformer trunk plus a linear value head. The trunk is a
  copy of the policy's (same weights at the start, without the LM head) or a smaller model from
  ``critic.model_path`` that reads the same token ids. Value-loss gradients reach only the
  critic, as in PPO's usual actor/critic split (and in verl and the anchor).
* ``shared_trunk``: a linear head on the policy's last hidden state. Cheaper (no second forward,
  no second copy of the weights), but the value loss back-propagates into the policy's trunk, so
  fitting values moves the policy; ``vf_coef`` then trades the two off.

Both are ``torch.nn.Module`` s called on hidden states of shape (rows, n, H) -> (rows, n); the
per-token forward (:func:`agentgym_core.rl.forward.forward_tokens`) takes them as ``value_head``
and either reads the policy's hidden states (shared trunk) or runs :meth:`SeparateCritic.last_hidden`
on the same packed or padded rows (separate). ``values[i, t]`` is V of the state before token t.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from agentgym_core.rl.config import CriticConfig, ModelConfig

__all__ = ["SeparateCritic", "ValueHead", "build_critic", "trunk_of"]


class ValueHead(torch.nn.Module):
    """A linear map of a last hidden state to a scalar value; zero-initialised (V = 0 at the start)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (...): one value per position."""
        return self.proj(hidden.float()).squeeze(-1)


class SeparateCritic(torch.nn.Module):
    """A critic with its own trunk: ``last_hidden`` runs the trunk, calling the module applies the head."""

    def __init__(self, trunk: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = ValueHead(hidden_size)

    def last_hidden(self, input_ids: torch.Tensor, **model_kwargs: Any) -> torch.Tensor:
        """The trunk's last hidden state, (rows, width) ids -> (rows, width, H).

        ``model_kwargs`` are the policy forward's (``position_ids``, and ``attention_mask`` for
        padded rows), so packed rows get the same block-diagonal attention as the policy's.
        """
        out = self.trunk(input_ids=input_ids, use_cache=False, **model_kwargs)
        return out.last_hidden_state

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (...): the value head on hidden states from :meth:`last_hidden`."""
        return self.head(hidden)


def trunk_of(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer body of a causal LM (``model.model`` for Llama/Qwen): everything but the LM head."""
    base = getattr(model, "base_model", None)
    if base is None or base is model or not hasattr(model, "base_model_prefix"):
        raise TypeError(f"{type(model).__name__} has no separate transformer body (expected a Hugging Face "
                        "*ForCausalLM with a base_model); use algorithm.critic.kind=shared_trunk")
    return base


def _hidden_size(trunk: torch.nn.Module) -> int:
    return int(trunk.get_input_embeddings().weight.shape[1])


def build_critic(config: CriticConfig, policy: torch.nn.Module, *, model_config: ModelConfig | None = None,
                 vocab_size: int | None = None) -> ValueHead | SeparateCritic:
    """The critic ``config`` asks for, on the policy's device.

    ``shared_trunk``: a :class:`ValueHead` sized to the policy's hidden state. ``separate``: a
    :class:`SeparateCritic` whose trunk is a copy of the policy's current weights (LoRA adapters
    merged into the copy), or the body of ``config.model_path`` loaded with ``model_config``'s dtype.
    ``vocab_size`` (the tokenizer's length) is checked against the critic's embeddings, because
    the critic reads the policy's token ids.
    """
    device = next(policy.parameters()).device
    if config.kind == "shared_trunk":
        hidden = policy.get_output_embeddings().weight.shape[1]
        return ValueHead(hidden).to(device)
    if config.kind != "separate":
        raise ValueError(f"algorithm.critic.kind must be 'separate' or 'shared_trunk'; got {config.kind!r}")
    if config.model_path is None:
        source = copy.deepcopy(policy)
        if hasattr(source, "merge_and_unload"):  # a LoRA policy: the critic trains full weights of the merged copy
            source = source.merge_and_unload()
    else:
        from agentgym_core.models import load_pretrained

        dtype = model_config.dtype if model_config is not None else "auto"
        source, _ = load_pretrained(config.model_path, device=str(device), dtype=dtype)
    trunk = trunk_of(source).to(device).train(False).requires_grad_(True)
    rows = trunk.get_input_embeddings().weight.shape[0]
    if vocab_size is not None and rows < vocab_size:
        raise ValueError(
            f"algorithm.critic.model_path={config.model_path!r} has {rows} token embeddings but the policy's "
            f"tokenizer has {vocab_size} tokens; the critic reads the policy's token ids, so it needs a model with "
            "the same tokenizer (e.g. a smaller model of the same family), or leave model_path unset to copy the policy"
        )
    return SeparateCritic(trunk, _hidden_size(trunk)).to(device)
