"""The memory-bound floor of decoding: how fast a GPU could sample if every decode step only had to read
the weights once and each row's keys and values once, at the card's peak memory bandwidth.

One decode step of B rows with a mean context of C tokens reads ``W + B * C * kv`` bytes (W: the weights'
bytes; kv: the keys and values of one token over all layers) and yields B tokens, so

    floor tokens/s = B * bandwidth / (W + B * C * kv)

It is a ceiling on speed (the "floor" of time per token): real decoders also compute, launch kernels and
wait on the host. ``bench/rollout.py --device cuda`` prints it beside every figure with the fraction reached.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PEAK_BANDWIDTH", "card_bandwidth", "decode_floor", "kv_bytes_per_token", "weight_bytes"]

PEAK_BANDWIDTH = [  # (substring of torch.cuda.get_device_name, bytes/s): the vendors' datasheet peaks, first match wins
    ("H200", 4.8e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),  # SXM5 / HBM3
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),
    ("L40S", 0.864e12),
    ("L4", 0.3e12),
    ("A10G", 0.6e12),
    ("A10", 0.6e12),
    ("RTX 4090", 1.008e12),
]


def card_bandwidth(device_name: str) -> float | None:
    """The card's peak memory bandwidth in bytes/s, or None for a card not in :data:`PEAK_BANDWIDTH`."""
    for name, bandwidth in PEAK_BANDWIDTH:
        if name in device_name:
            return bandwidth
    return None


def weight_bytes(model: Any) -> int:
    """Bytes of the module's parameters (tied ones once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def kv_bytes_per_token(config: Any, element_size: int) -> int:
    """Bytes of one token's keys and values over every layer."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * element_size


def decode_floor(*, weights: int, kv_per_token: int, rows: float, mean_context: float, bandwidth: float) -> float:
    """Tokens/s of a decoder bound by memory alone: ``rows`` rows per step, ``mean_context`` tokens each."""
    return rows * bandwidth / (weights + rows * mean_context * kv_per_token)
