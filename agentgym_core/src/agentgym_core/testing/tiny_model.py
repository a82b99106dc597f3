"""A tiny randomly initialised chat model, built offline, for tests of rollouts and training.

``tiny_chat_model()`` returns ``(model, tokenizer)``: a byte-level BPE tokenizer trained on a few
lines of text (so any string round-trips), with ChatML special tokens and a ChatML chat template,
and a 2-layer Llama of matching vocabulary. Nothing is downloaded; building it takes well under a
second. It is a real model (real forward passes, real KV cache), just small and untrained.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHATML_TEMPLATE", "tiny_chat_model", "tiny_tokenizer"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML, as SmolLM2 and Qwen use it (without a default system message)."""

_CORPUS = [
    "Thought: I should guess a number in the middle. Action: guess 50",
    "Your guess is too low. Your guess is too high. Correct! The number was 7.",
    "You are an agent. Reply with Thought: ... then Action: ...",
    "go to red ball 1, pickup key, turn left, turn right, move forward, toggle, drop",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 25 30 40 50 60 70 80 90 100",
    "the a an is was in of to and you your guess number between invalid action",
]


def tiny_tokenizer(vocab_size: int = 400, chat_template: str = CHATML_TEMPLATE) -> Any:
    """A byte-level BPE tokenizer with ChatML specials (``<|im_end|>`` is EOS and pad)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|im_end|>", bos_token="<|im_start|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def tiny_chat_model(seed: int = 0, *, hidden_size: int = 64, layers: int = 2, chat_template: str = CHATML_TEMPLATE):
    """``(model, tokenizer)``: a random tiny Llama (float32, CPU, eval mode) and its tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer(chat_template=chat_template)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    return model, tokenizer
