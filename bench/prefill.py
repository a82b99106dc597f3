"""Prefill of rows joining a decode batch: one padded forward pass vs one forward pass per row.

The rollout engine admits a trajectory's next turn the moment its environment answers, so rows
that join together differ in how much of their history is cached and how many new tokens they
bring. This script builds such rows with the backend itself -- turn 1 prefills a history of
``cached`` random tokens under a session key, turn 2 adds ``new`` tokens -- and times turn 2
(one sampled token, so the time is the prefill) with ``prefill='batched'`` and ``'per_row'``,
alternating, best of ``--repeats``. Writes bench/results/prefill.json.

    python bench/prefill.py --threads 1                 # SmolLM2-135M, 8 rows, seeded lengths
    python bench/prefill.py --model tiny --rows 4       # smoke run
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch
from common import load_backend, write_json

from agentgym_core.rollout import SamplingParams

ONE_TOKEN = SamplingParams(temperature=0, max_new_tokens=1)


def time_join(backend, histories: list[list[int]], suffixes: list[list[int]], mode: str) -> float:
    """Seconds for the rows to join with their cached histories (turn 2 of a session)."""
    keys = [("bench", i) for i in range(len(histories))]
    backend.prefill = mode
    backend.sessions.clear()
    for key, history in zip(keys, histories, strict=True):  # cache each history alone (not timed)
        backend.generate([history], ONE_TOKEN, sessions=[key])  # keeps exactly the history's keys/values
    prompts = [[*h, *s] for h, s in zip(histories, suffixes, strict=True)]
    reused = backend.sessions.stats.reused_tokens
    start = time.perf_counter()
    backend.generate(prompts, ONE_TOKEN, sessions=keys)
    seconds = time.perf_counter() - start
    if backend.sessions.stats.reused_tokens - reused != sum(len(h) for h in histories):
        raise RuntimeError("the histories were not read from their caches; the timing would include them")
    backend.sessions.clear()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model spec, or 'tiny' (random tiny Llama)")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cached", type=int, nargs=2, default=[450, 1500], help="range of cached history lengths")
    parser.add_argument("--new", type=int, nargs=2, default=[40, 160], help="range of new tokens per row")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/results/prefill.json")
    args = parser.parse_args()
    backend = load_backend(args.model, threads=args.threads, device="cpu")
    rng = random.Random(args.seed)
    vocab = backend.model.config.vocab_size
    lengths = [(rng.randint(*args.cached), rng.randint(*args.new)) for _ in range(args.rows)]
    histories = [[rng.randrange(vocab) for _ in range(c)] for c, _ in lengths]
    suffixes = [[rng.randrange(vocab) for _ in range(n)] for _, n in lengths]
    best = {"batched": float("inf"), "per_row": float("inf")}
    for _ in range(args.repeats):
        for mode in best:
            best[mode] = min(best[mode], time_join(backend, histories, suffixes, mode))
            print(f"{mode:>8}: {best[mode]:.2f} s (best so far)", flush=True)
    new_tokens = sum(n for _, n in lengths)
    result = {
        "model": args.model, "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "rows": lengths, "new_tokens": new_tokens, "padded_new_tokens": args.rows * max(n for _, n in lengths),
        "seconds": best, "speedup_per_row_vs_batched": best["batched"] / best["per_row"],
        "load_avg_1m": os.getloadavg()[0],
    }
    print(f"rows (cached, new): {lengths}")
    print(f"{new_tokens} new tokens ({result['padded_new_tokens']} when padded): batched {best['batched']:.2f} s, "
          f"per_row {best['per_row']:.2f} s, x{result['speedup_per_row_vs_batched']:.2f}")
    print(f"wrote {write_json(args.out, result)}")


if __name__ == "__main__":
    main()
