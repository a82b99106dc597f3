"""Decode steps over transformers' ``DynamicCache`` vs the backend's growing cache, and the weights' share.

``--rows`` rows over ``--cached`` cached tokens with SmolLM2-135M (random keys/values, a real
model) decode ``--steps`` tokens in a row, as a rollout does; each cache kind runs ``--repeats``
times, alternating, and its mean step time is kept from its best repeat:

* ``dynamic``: transformers' ``DynamicCache``, which concatenates every layer's keys and values
  into new memory at every step (the baseline);
* ``growing``: :class:`agentgym_backend_transformers.kv_cache.GrowingLayer` caches, which write the
  new column into spare columns in place.

Both must pick the same greedy tokens (checked). Then a linear layer of the step's shape, timed
alone, gives the machine's matmul rate, and all the model's weights at that rate give a step's
weight cost: what no cache layout can remove. Writes bench/results/decode_step.json.

    python bench/decode_step.py --threads 1
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from common import write_json
from transformers import DynamicCache

from agentgym_backend_transformers.kv_cache import growing_cache
from agentgym_core.models import load_pretrained

KINDS = {"dynamic": lambda config: DynamicCache(config=config), "growing": growing_cache}


def decode(model, kind: str, keys: list[torch.Tensor], values: list[torch.Tensor], steps: int) -> tuple[float, list[int]]:
    """Mean seconds per decode step over ``steps`` greedy steps from the given cache contents; the tokens."""
    b, c = keys[0].shape[0], keys[0].shape[2]
    cache = KINDS[kind](model.config)
    for index, (k, v) in enumerate(zip(keys, values, strict=True)):
        cache.update(k.clone(), v.clone(), index)
    attention = torch.ones(b, c, dtype=torch.long)
    token, tokens = torch.full((b, 1), 5), []
    start = time.perf_counter()
    for step in range(steps):
        attention = torch.cat([attention, attention.new_ones(b, 1)], dim=-1)
        logits = model(input_ids=token, attention_mask=attention, position_ids=torch.full((b, 1), c + step),
                       past_key_values=cache, use_cache=True).logits[:, -1]
        token = logits.argmax(-1, keepdim=True)
        tokens += token.squeeze(-1).tolist()
    return (time.perf_counter() - start) / steps, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--cached", type=int, nargs="+", default=[500, 1000, 1500])
    parser.add_argument("--steps", type=int, default=32, help="consecutive decode steps per measurement")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="bench/results/decode_step.json")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, _ = load_pretrained(args.model)
    model.eval()
    cfg = model.config
    heads, dim = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    b = args.rows
    result: dict = {"model": args.model, "rows": b, "steps": args.steps, "torch_threads": torch.get_num_threads(),
                    "cpu_count": os.cpu_count(), "load_avg_1m_start": os.getloadavg()[0], "runs": []}
    with torch.inference_mode():
        x, linear = torch.randn(b, cfg.hidden_size), torch.nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        linear(x)
        start = time.perf_counter()
        for _ in range(50):
            linear(x)
        gflops = 2 * b * cfg.hidden_size * cfg.intermediate_size / ((time.perf_counter() - start) / 50) / 1e9
        params = sum(p.numel() for p in model.parameters())  # tied embedding counted once: the lm_head
        result["linear_gflops"] = gflops
        result["weights_at_that_rate_s"] = weights_s = 2 * b * params / (gflops * 1e9)
        print(f"weights alone at {gflops:.1f} GFLOPS: {weights_s:.3f} s per step of {b} rows")
        print(f"{'cached':>6} {'dynamic s/step':>14} {'growing s/step':>14} {'speedup':>7}")
        for c in args.cached:
            gen = torch.Generator().manual_seed(c)
            keys = [torch.randn(b, heads, c, dim, generator=gen) for _ in range(cfg.num_hidden_layers)]
            values = [torch.randn(b, heads, c, dim, generator=gen) for _ in range(cfg.num_hidden_layers)]
            best: dict[str, float] = {}
            tokens: dict[str, list[int]] = {}
            for _ in range(args.repeats):
                for kind in KINDS:
                    seconds, tokens[kind] = decode(model, kind, keys, values, args.steps)
                    best[kind] = min(best.get(kind, float("inf")), seconds)
            if tokens["dynamic"] != tokens["growing"]:
                raise SystemExit(f"cached={c}: the two caches picked different tokens")
            run = {"cached": c, "dynamic_step_s": best["dynamic"], "growing_step_s": best["growing"],
                   "speedup": best["dynamic"] / best["growing"]}
            result["runs"].append(run)
            print(f"{c:>6} {best['dynamic']:>14.3f} {best['growing']:>14.3f} {run['speedup']:>6.2f}x", flush=True)
            del keys, values
    result["load_avg_1m_end"] = os.getloadavg()[0]
    print(f"wrote {write_json(args.out, result)}")


if __name__ == "__main__":
    main()
