"""Policy-update throughput against a plain padded float32 update of the same batch, same run.

Builds a batch shaped like multi-turn agent trajectories (lengths spread like BabyAI episodes of
1..horizon turns: a ~350-token prompt, then 30-60 sampled tokens and ~120 observation tokens per
turn) and times forward + backward + optimizer step of the PPO loss with
``agentgym_core.rl.update.ppo_update`` in four variants, interleaved ``--repeats`` times (best kept):

* ``padded`` (the baseline): one sequence per row, right-padded, float32;
* ``packed``: padding-free packing of several sequences per row (``algorithm.packing``);
* ``padded_bf16`` / ``packed_bf16``: the same under bf16 autocast (``model.mixed_precision``).

    python bench/train_step.py [--model smollm2-135m-instruct] [--batch 8] [--repeats 2]

Prints real (unpadded) tokens/s per variant and each one's ratio to the baseline; writes
bench/results/train_step.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch

from agentgym_core.rl.config import AlgorithmConfig
from agentgym_core.rl.forward import mixed_precision
from agentgym_core.rl.update import UpdateInputs, ppo_update


def synthetic_batch(batch: int, vocab: int, seed: int, max_turns: int) -> tuple[list[list[int]], torch.Tensor]:
    rng = random.Random(seed)
    seqs, masks = [], []
    for _ in range(batch):
        turns = rng.randint(1, max_turns)
        ids, mask = [rng.randrange(vocab) for _ in range(350)], [0] * 350
        for k in range(turns):
            n = rng.randint(30, 60)
            ids += [rng.randrange(vocab) for _ in range(n)]
            mask += [1] * n
            if k < turns - 1:
                ids += [rng.randrange(vocab) for _ in range(120)]
                mask += [0] * 120
        seqs.append(ids)
        masks.append(mask)
    T = max(len(s) for s in seqs)
    m = torch.zeros(batch, T)
    for i, mk in enumerate(masks):
        m[i, : len(mk)] = torch.tensor(mk, dtype=torch.float32)
    return seqs, m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from agentgym_core.models import load_pretrained

    model, tokenizer = load_pretrained(args.model, device="cuda" if torch.cuda.is_available() else "cpu", dtype="auto")
    seqs, mask = synthetic_batch(args.batch, len(tokenizer), 0, args.max_turns)
    g = torch.Generator().manual_seed(0)
    B, T = mask.shape
    device = next(model.parameters()).device
    inputs = UpdateInputs(sequences=seqs, mask=mask.to(device), advantages=torch.randn(B, 1, generator=g).expand(B, T).to(device) * mask.to(device),
                          returns=torch.zeros(B, T, device=device), old_logprobs=torch.zeros(B, T, device=device) - 2.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: both variants see identical weights
    total = sum(len(s) for s in seqs)
    padded_total = B * T
    results: dict[str, dict[str, float]] = {}
    variants = {"padded": (False, "no"), "packed": (True, "no"), "padded_bf16": (False, "bf16"),
                "packed_bf16": (True, "bf16")}
    for _ in range(args.repeats):
        for key, (packing, precision) in variants.items():
            cfg = AlgorithmConfig(packing=packing, micro_batch_tokens=args.micro_batch_tokens, kl={"coef": 0.0})
            t0 = time.perf_counter()
            with mixed_precision(precision, model):
                ppo_update(model, optimizer, inputs, cfg, temperature=1.0, generator=torch.Generator().manual_seed(0),
                           pad_token_id=int(tokenizer.pad_token_id or 0))
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            if seconds < results.get(key, {}).get("seconds", float("inf")):
                results[key] = {"seconds": seconds, "tokens_per_s": total / seconds}
            print(f"{key:12s} {seconds:7.2f} s  {total / seconds:8.1f} real tokens/s", flush=True)
    base = results["padded"]["tokens_per_s"]
    ratios = {f"{key}_over_padded": results[key]["tokens_per_s"] / base for key in variants if key != "padded"}
    summary = {"model": args.model, "batch": B, "real_tokens": total, "padded_tokens": padded_total,
               "padding_share": 1 - total / padded_total, "micro_batch_tokens": args.micro_batch_tokens,
               "threads": args.threads, "device": str(device), "load_avg_1m": os.getloadavg()[0],
               **results, **ratios}
    print(json.dumps(summary, indent=2))
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "train_step.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
