"""Where one decode step's time goes: the whole step vs what its weights alone would cost.

One decode step of ``--rows`` rows over ``--cached`` cached tokens with SmolLM2-135M (random
keys/values, a real model), best of ``--repeats``; then a linear layer of the step's shape, timed
alone, gives the machine's matmul rate, and all the model's weights at that rate give the step's
weight cost. The rest is what grows with the cached length: attention, the KV cache's growth
(transformers' ``DynamicCache`` concatenates every layer every step), masks. Writes
bench/results/decode_step.json.

    python bench/decode_step.py --threads 1
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from common import write_json
from transformers import DynamicCache

from agentgym_core.models import load_pretrained


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--cached", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="bench/results/decode_step.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, _ = load_pretrained(args.model)
    model.eval()
    cfg = model.config
    heads, dim = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    b, c = args.rows, args.cached
    with torch.inference_mode():
        def step() -> None:  # a fresh cache each time, so every step sees the same length
            cache = DynamicCache(config=cfg)
            for i in range(cfg.num_hidden_layers):
                cache.update(torch.randn(b, heads, c, dim), torch.randn(b, heads, c, dim), i)
            start = time.perf_counter()
            model(input_ids=torch.full((b, 1), 5), attention_mask=torch.ones(b, c + 1, dtype=torch.long),
                  position_ids=torch.full((b, 1), c), past_key_values=cache, use_cache=True)
            step.seconds = min(getattr(step, "seconds", float("inf")), time.perf_counter() - start)

        for _ in range(args.repeats):
            step()
        x, linear = torch.randn(b, cfg.hidden_size), torch.nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        per_call = best_of(lambda: [linear(x) for _ in range(50)], args.repeats) / 50
        gflops = 2 * b * cfg.hidden_size * cfg.intermediate_size / per_call / 1e9
        params = sum(p.numel() for p in model.parameters())  # tied embedding counted once: the lm_head
        linear_s = 2 * b * params / (gflops * 1e9)
    result = {
        "model": args.model, "rows": b, "cached": c, "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(), "step_s": step.seconds, "linear_gflops": gflops,
        "weights_at_that_rate_s": linear_s,
        "rest_s (attention, cache growth, masks)": step.seconds - linear_s,
        "load_avg_1m": os.getloadavg()[0],
    }
    for key, value in result.items():
        print(f"{key:>40}: {value:.3f}" if isinstance(value, float) else f"{key:>40}: {value}")
    print(f"wrote {write_json(args.out, result)}")


if __name__ == "__main__":
    main()
