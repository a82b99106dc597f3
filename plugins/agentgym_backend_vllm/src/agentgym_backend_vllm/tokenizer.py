"""The tokenizer side of the backend, the same in both modes: read from the model's own directory.

The chat template belongs to the model, so it is rendered with the Hugging Face tokenizer saved
next to the weights; vLLM reads the same files, so the ids it samples are the ids decoded here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ModelTokenizer", "finish_reason", "request_cap"]


class ModelTokenizer:
    """Chat template, encode, decode and the end-of-turn ids of one model."""

    def __init__(self, tokenizer: Any, *, extra_eos: Sequence[int] = ()) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat_template; the backend renders turns with the model's own template")
        self.tokenizer = tokenizer
        eos = set(extra_eos)
        if tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        if not eos:
            raise ValueError("neither the tokenizer nor the model's generation config names an EOS token")
        self.eos_token_ids = frozenset(int(t) for t in eos)

    @classmethod
    def load(cls, model: str) -> tuple[ModelTokenizer, str, str]:
        """(tokenizer side, the path vLLM loads, the tokenizer directory) for a model spec agentgym resolves."""
        from transformers import AutoTokenizer, GenerationConfig

        from agentgym_core.models import resolve_model

        resolved = resolve_model(model)
        kwargs: dict[str, Any] = {"local_files_only": True}
        if resolved.gguf_file:
            kwargs["gguf_file"] = resolved.gguf_file
        tokenizer = AutoTokenizer.from_pretrained(resolved.directory, **kwargs)
        extra: list[int] = []
        try:
            generation = GenerationConfig.from_pretrained(resolved.directory, **kwargs)
        except OSError:  # no generation_config.json: the tokenizer's EOS is all there is
            generation = None
        cfg_eos = getattr(generation, "eos_token_id", None)
        if cfg_eos is not None:
            extra = list(cfg_eos) if isinstance(cfg_eos, list) else [cfg_eos]
        path = resolved.directory / resolved.gguf_file if resolved.gguf_file else resolved.directory
        return cls(tokenizer, extra_eos=extra), str(path), str(resolved.directory)

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool,
                            tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt,
            tools=[dict(t) for t in tools] if tools else None,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)


def finish_reason(token_ids: Sequence[int], vllm_reason: str | None, eos_token_ids: frozenset[int]) -> str:
    """agentgym's finish reason from vLLM's: 'stop' on an EOS id is 'eos', otherwise a stop string."""
    if token_ids and token_ids[-1] in eos_token_ids:
        return "eos"
    if vllm_reason == "length":
        return "length"
    if vllm_reason == "stop":
        return "stop_string"
    raise RuntimeError(f"vLLM ended a request with finish_reason={vllm_reason!r} (aborted or failed); "
                       "see the engine's log")


def request_cap(max_model_len: int, prompt_length: int, cap: int, turn_cap: int) -> int:
    """A request's token cap: min(turn cap, remaining trajectory budget, room left in the model's context)."""
    room = max_model_len - prompt_length
    if room < 1:
        raise ValueError(f"a prompt of {prompt_length} tokens leaves no room in max_model_len={max_model_len}; "
                         "lower rollout.max_total_tokens to at most max_model_len")
    return max(1, min(turn_cap, cap, room))
