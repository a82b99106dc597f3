"""Batched sampling with a KV cache on Hugging Face transformers.

One ``generate`` call samples a reply for every prompt given: prompts are left-padded into one
batch, prefilled once, then decoded token by token from the KV cache. Rows that finish (end-of-turn
token, stop string, or their token cap) are dropped from the batch and the cache right away, so
long replies do not make short ones pay for padding. Log-probs are taken from the raw logits at
the sampling temperature, before top-k/top-p truncation, so ``score`` (a plain forward pass)
reproduces them.

Sessions (multi-turn reuse): when the caller names a session per prompt (the rollout engine passes
one per trajectory), the keys and values a row's model has read are kept after the call
(:mod:`agentgym_backend_transformers.sessions`). The next turn's prompt starts with exactly those
tokens, so only the new suffix (the last sampled token, the observation, the generation prompt) is
prefilled. In the batch, a row's cached prefix and its new suffix sit side by side with padding
columns masked out between them; positions are passed explicitly, and cached keys already carry
their rotary positions, so the row computes what a forward pass over its whole history computes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from agentgym_backend_transformers.config import TransformersBackendConfig
from agentgym_backend_transformers.sessions import SessionKV, SessionStore
from agentgym_core.models import load_pretrained
from agentgym_core.rollout.backend import Sample, SamplingParams

__all__ = ["TransformersBackend", "make_backend", "pick_device"]


def pick_device(device: str = "auto") -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask logits outside top-k / the top-p nucleus with -inf. logits: (B, V)."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the mass before it already reaches top_p; the top token always stays.
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class TransformersBackend:
    """A :class:`agentgym_core.rollout.RolloutBackend` over a transformers causal LM.

    Build it from a config (``TransformersBackend.from_config``) or around an existing model and
    tokenizer (``TransformersBackend(model, tokenizer)``), e.g. the trainer's own module: then the
    backend always samples from the current weights and ``load_weights`` is not needed.
    """

    name = "transformers"

    def __init__(
        self, model: Any, tokenizer: Any, *, max_batch_size: int = 64, session_cache_mb: float = 1024.0
    ) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat_template; the backend renders turns with the model's own template")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        cfg_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if cfg_eos is not None:
            eos.update(cfg_eos if isinstance(cfg_eos, list) else [cfg_eos])
        if not eos:
            raise ValueError("neither the tokenizer nor the model's generation config names an EOS token")
        self.eos_token_ids = frozenset(int(t) for t in eos)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else min(self.eos_token_ids))
        self.sessions = SessionStore(int(session_cache_mb * 2**20))

    @classmethod
    def from_config(cls, config: TransformersBackendConfig) -> TransformersBackend:
        if config.threads:
            torch.set_num_threads(config.threads)
        model, tokenizer = load_pretrained(config.model, device=pick_device(config.device), dtype=config.dtype)
        return cls(
            model, tokenizer, max_batch_size=config.max_batch_size, session_cache_mb=config.session_cache_mb
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- tokenizer side -------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    # -- weights --------------------------------------------------------------------------------
    @torch.no_grad()
    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Copy the trainer's weights in place (any device/dtype; names must match the model's)."""
        own = self.model.state_dict()
        unknown = sorted(set(state_dict) - set(own))
        if unknown:
            raise KeyError(f"load_weights: {len(unknown)} names the rollout model does not have, e.g. {unknown[:3]}")
        for name, value in state_dict.items():
            if own[name].data_ptr() != value.data_ptr():
                own[name].copy_(value)
        self.sessions.clear()  # cached keys/values were computed by the old weights

    def release_session(self, session: Hashable) -> None:
        """Free the KV cache kept for ``session`` (the engine calls it when a trajectory ends)."""
        self.sessions.release(session)

    # -- sampling -------------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        max_new_tokens: Sequence[int] | None = None,
        sessions: Sequence[Hashable | None] | None = None,
    ) -> list[Sample]:
        """Sample one reply per prompt; ``sessions`` (one key or None per prompt) reuses and keeps
        each row's KV cache across calls (see the module docstring)."""
        caps = [params.max_new_tokens] * len(prompts)
        if max_new_tokens is not None:
            caps = [max(1, min(params.max_new_tokens, int(c))) for c in max_new_tokens]
        keys: list[Hashable | None] = [None] * len(prompts) if sessions is None else list(sessions)
        if len(keys) != len(prompts):
            raise ValueError(f"generate: {len(keys)} sessions for {len(prompts)} prompts; pass one key (or None) each")
        named = [k for k in keys if k is not None]
        if len(set(named)) != len(named):
            raise ValueError("generate: a session key appears twice in one call; use one key per trajectory")
        generator = self._generator_for(params.seed)
        out: list[Sample] = []
        for start in range(0, len(prompts), self.max_batch_size):
            end = start + self.max_batch_size
            out.extend(self._generate_batch(prompts[start:end], caps[start:end], params, generator, keys[start:end]))
        return out

    def _generator_for(self, seed: int | None) -> torch.Generator | None:
        """A fresh generator per seeded call, so the same seed and prompts give the same samples."""
        if seed is None:
            return None
        return torch.Generator(device=self.device).manual_seed(seed)

    def _reusable(self, cache: Any) -> bool:
        """Session reuse needs plain full-attention layers (sliding windows drop old columns)."""
        from transformers.cache_utils import DynamicLayer

        return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)

    def _prefill(
        self, prompts: Sequence[Sequence[int]], cached: list[SessionKV | None], cache: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Read every prompt into ``cache``; returns (last logits (B, V), attention (B, C+S), next position (B,)).

        Row i's layout: [pad | cached prefix (c_i) | pad | new suffix (s_i)], padding masked out, so
        its next token is always at column -1 and the rows can decode together.
        """
        device = self.device
        batch = len(prompts)
        reuse = [0 if kv is None else kv.usable_length(prompt) for kv, prompt in zip(cached, prompts, strict=True)]
        width_c = max(reuse)
        width_s = max(len(p) - c for p, c in zip(prompts, reuse, strict=True))
        attention = torch.zeros((batch, width_c + width_s), dtype=torch.long, device=device)
        input_ids = torch.full((batch, width_s), self.pad_token_id, dtype=torch.long, device=device)
        positions = torch.zeros((batch, width_s), dtype=torch.long, device=device)
        for row, (prompt, c) in enumerate(zip(prompts, reuse, strict=True)):
            s = len(prompt) - c
            attention[row, width_c - c:width_c] = 1
            attention[row, width_c + width_s - s:] = 1
            input_ids[row, width_s - s:] = torch.tensor(list(prompt[c:]), dtype=torch.long)
            positions[row, width_s - s:] = torch.arange(c, c + s)
        if width_c:  # lay the cached prefixes into the batch cache, right-aligned at column width_c
            for index in range(len(cache.layers)):
                sample_k, sample_v = next(kv.layers[index] for kv, c in zip(cached, reuse, strict=True) if c)
                keys = sample_k.new_zeros((batch, sample_k.shape[0], width_c, sample_k.shape[-1]))
                values = sample_v.new_zeros((batch, sample_v.shape[0], width_c, sample_v.shape[-1]))
                for row, (kv, c) in enumerate(zip(cached, reuse, strict=True)):
                    if c:
                        keys[row, :, width_c - c:] = kv.layers[index][0][:, :c]
                        values[row, :, width_c - c:] = kv.layers[index][1][:, :c]
                cache.update(keys, values, index)
        self.sessions.stats.reused_tokens += sum(reuse)
        self.sessions.stats.prefilled_tokens += sum(len(p) for p in prompts) - sum(reuse)
        logits = self.model(
            input_ids=input_ids, attention_mask=attention, position_ids=positions,
            past_key_values=cache, use_cache=True, logits_to_keep=1,
        ).logits[:, -1, :]  # (B, V)
        return logits, attention, positions[:, -1] + 1

    def _save_session(self, key: Hashable, cache: Any, row: int, attention: torch.Tensor, token_ids: list[int]) -> None:
        """Keep the keys/values of batch row ``row`` (its unmasked columns) under ``key``."""
        columns = attention[row].nonzero().squeeze(-1)  # (n,)
        if columns.numel() != len(token_ids):  # never store a cache that does not match its tokens
            raise RuntimeError(f"session cache of {columns.numel()} columns for {len(token_ids)} tokens")
        layers = [(layer.keys[row][:, columns], layer.values[row][:, columns]) for layer in cache.layers]
        self.sessions.put(key, SessionKV(token_ids=token_ids, layers=layers))

    @torch.inference_mode()
    def _generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        caps: list[int],
        params: SamplingParams,
        generator: Any,
        keys: Sequence[Hashable | None],
    ) -> list[Sample]:
        from transformers import DynamicCache

        device = self.device
        batch = len(prompts)
        cache = DynamicCache(config=self.model.config)
        if not self._reusable(cache):
            keys = [None] * batch
        cached: list[SessionKV | None] = [None if k is None else self.sessions.take(k) for k in keys]
        self.sessions.stats.hits += sum(kv is not None for kv in cached)
        self.sessions.stats.misses += sum(kv is None and k is not None for kv, k in zip(cached, keys, strict=True))
        logits, attention, next_position = self._prefill(prompts, cached, cache)
        del cached  # the batch cache holds copies; free the old session tensors early

        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        reasons: list[str] = ["length"] * batch
        rows = list(range(batch))  # batch row -> prompt index
        temperature = params.logprob_temperature
        stops = params.stop
        while True:
            scaled = logits.float() / temperature
            log_p = torch.log_softmax(scaled, dim=-1)  # (b, V)
            if params.temperature == 0:
                chosen = scaled.argmax(-1)
            else:
                probs = _filter_logits(scaled, params.top_k, params.top_p).softmax(-1)
                chosen = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (b,)
            chosen_lp = log_p.gather(-1, chosen[:, None]).squeeze(-1)
            chosen_list, lp_list = chosen.tolist(), chosen_lp.tolist()
            keep: list[int] = []
            for b, index in enumerate(rows):
                tokens[index].append(chosen_list[b])
                logprobs[index].append(lp_list[b])
                if chosen_list[b] in self.eos_token_ids:
                    reasons[index] = "eos"
                elif stops and any(s in self.decode(tokens[index][-64:]) for s in stops):
                    reasons[index] = "stop_string"
                elif len(tokens[index]) < caps[index]:
                    keep.append(b)
            if len(keep) < len(rows):
                # Finished rows: keep what their model read (prompt + reply minus its last, unread token).
                kept = set(keep)
                for b, index in enumerate(rows):
                    if b not in kept and keys[index] is not None:
                        read = [*prompts[index], *tokens[index][:-1]]
                        self._save_session(keys[index], cache, b, attention, read)
            if not keep:
                break
            if len(keep) < len(rows):  # drop finished rows from the batch and the KV cache
                keep_t = torch.tensor(keep, device=device)
                cache.batch_select_indices(keep_t)
                attention, chosen, next_position = attention[keep_t], chosen[keep_t], next_position[keep_t]
                rows = [rows[b] for b in keep]
            attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
            logits = self.model(
                input_ids=chosen[:, None], attention_mask=attention, position_ids=next_position[:, None],
                past_key_values=cache, use_cache=True,
            ).logits[:, -1, :]
            next_position = next_position + 1
        return [
            Sample(token_ids=t, logprobs=lp, finish_reason=r)  # type: ignore[arg-type]
            for t, lp, r in zip(tokens, logprobs, reasons, strict=True)
        ]

    @torch.inference_mode()
    def score(self, sequences: Sequence[Sequence[int]], *, temperature: float = 1.0) -> list[list[float]]:
        out: list[list[float]] = []
        for seq in sequences:  # one at a time: no padding, so nothing can differ from a plain forward
            ids = torch.tensor([list(seq)], dtype=torch.long, device=self.device)
            logits = self.model(input_ids=ids).logits[0, :-1].float() / temperature  # (T-1, V)
            lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            out.append([0.0, *lp.tolist()])
        return out


def make_backend(config: TransformersBackendConfig | Mapping[str, Any] | None = None) -> TransformersBackend:
    """The registered factory: a config (or dict of its fields) -> a loaded backend."""
    if not isinstance(config, TransformersBackendConfig):
        config = TransformersBackendConfig.model_validate(dict(config or {}))
    return TransformersBackend.from_config(config)
