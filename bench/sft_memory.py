"""Where an SFT step of the main job's shape spends resident memory (SmolLM2-135M on CPU).

The main job's SFT phase (examples/babyai_grpo_cpu.yaml: 8 episodes per step, gradient checkpointing,
bf16 autocast, AdamW) peaks far above what one step in a fresh process needs. This script runs such
steps on BabyAI expert episodes and reads the peak RSS of every part (each forward, each backward, the
optimizer step: Linux's high-water mark, reset per part) and the RSS left after each step once
``release_memory()`` has run (the floor the next step starts from). The step is
:func:`agentgym_core.finetune.sft.sft_update` taken apart, under one autocast context as the
fine-tuning loop runs it. ``--compare-onednn-cache N`` runs the same steps twice, each in a fresh
process: with oneDNN's own primitive cache and with ``ONEDNN_PRIMITIVE_CACHE_CAPACITY=N`` (the
variable is read once, when oneDNN first runs), and reports both with their ratios.
Writes bench/results/sft_memory.json.

    python bench/sft_memory.py --compare-onednn-cache 0        # 2k-token micro-batches, 3 steps
    python bench/sft_memory.py --micro-batch-tokens 1024
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def rss_gb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8, help="episodes per optimizer step")
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=1000, help="longest episode used (tokens)")
    parser.add_argument("--compare-onednn-cache", type=int, default=None, metavar="N",
                        help="also run with ONEDNN_PRIMITIVE_CACHE_CAPACITY=N (0: no cache) and compare")
    parser.add_argument("--expert-tasks", type=int, default=100, help="BabyAI training tasks the expert plays")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "sft_memory.json"))
    parser.add_argument("--one-setting", help=argparse.SUPPRESS)  # internal: measure in this process, JSON here
    args = parser.parse_args()
    if args.one_setting:
        Path(args.one_setting).write_text(json.dumps(measure(args)))
        return

    sys.path.insert(0, str(Path(__file__).parent))
    from common import write_json

    settings = {"oneDNN cache default": None}
    if args.compare_onednn_cache is not None:
        settings[f"oneDNN cache {args.compare_onednn_cache}"] = str(args.compare_onednn_cache)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, capacity in settings.items():
            env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
            if capacity is not None:
                env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = capacity
            out = Path(tmp) / "run.json"
            print(f"{label}:", flush=True)
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one-setting", str(out)], env=env, check=True)
            runs[label] = {"onednn_cache_capacity": capacity, **json.loads(out.read_text())}
    result = {"settings": {k: v for k, v in vars(args).items() if k != "one_setting"}, "runs": runs}
    if len(runs) == 2:
        base, other = runs.values()
        result["peak_ratio"] = other["peak_gb"] / base["peak_gb"]
        result["time_ratio"] = other["seconds"] / base["seconds"]
        print(f"peak x{result['peak_ratio']:.3f}, time x{result['time_ratio']:.2f} ({', '.join(runs)})")
    print(f"wrote {write_json(args.out, result)}")


def measure(args: argparse.Namespace) -> dict:
    """The steps in this process: per-part peaks, the floor after each step, seconds."""
    import torch

    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.common import padded_mask, token_budget_chunks
    from agentgym_core.finetune.config import CollectConfig
    from agentgym_core.finetune.data import load_examples
    from agentgym_core.finetune.sft import sft_loss
    from agentgym_core.memory import PhasePeak, release_memory
    from agentgym_core.rl.config import ModelConfig, OptimConfig
    from agentgym_core.rl.forward import forward_tokens, mixed_precision
    from agentgym_core.rl.setup import build_optimizer, load_policy

    with tempfile.TemporaryDirectory() as tmp:  # the expert's episodes, collected afresh in each process
        data = Path(tmp) / "expert.jsonl"
        collect(CollectConfig(env="babyai", policy="expert", n=args.expert_tasks, shuffle=True, max_turns=12,
                              out=str(data)), progress=False)
        examples = [e for e in load_examples(data) if len(e.token_ids) <= args.max_tokens and sum(e.loss_mask)]
    needed = args.steps * args.batch_size
    if len(examples) < needed:
        raise SystemExit(f"{len(examples)} expert episodes of at most {args.max_tokens} tokens, {needed} needed: "
                         "raise --expert-tasks")
    random.Random(0).shuffle(examples)

    model, _ = load_policy(ModelConfig(path="smollm2-135m-instruct", threads=args.threads,
                                       gradient_checkpointing=True, mixed_precision="auto"))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer, _ = build_optimizer(params, [], OptimConfig(lr=5e-5), args.steps)
    release_memory()
    loaded = rss_gb()
    print(f"model loaded: RSS {loaded:.2f} GB")
    steps = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        batch = examples[step * args.batch_size:(step + 1) * args.batch_size]
        mask = padded_mask(batch)
        num_tokens = float(mask.sum())
        lengths = [len(e.token_ids) for e in batch]
        model.train()
        parts = []
        with mixed_precision("auto", model):  # one context for the whole step, as the fine-tuning loop has
            for rows in token_budget_chunks(range(len(batch)), lengths, args.micro_batch_tokens):
                with PhasePeak() as forward_peak:
                    stats = forward_tokens(model, [batch[r].token_ids for r in rows], mask[rows],
                                           max_tokens=args.micro_batch_tokens)
                    loss = sft_loss(stats.logprobs, mask[rows], agg="token_mean", num_tokens=num_tokens,
                                    num_seqs=float(len(batch)))
                with PhasePeak() as backward_peak:
                    loss.backward()
                del stats, loss
                parts.append({"tokens": sum(lengths[r] for r in rows), "forward_peak_gb": forward_peak.gb,
                              "backward_peak_gb": backward_peak.gb, "rss_after_gb": rss_gb()})
            with PhasePeak() as optimizer_peak:
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        model.eval()
        release_memory()
        peak = max([optimizer_peak.gb] + [max(p["forward_peak_gb"], p["backward_peak_gb"]) for p in parts])
        steps.append({"micro_batches": parts, "optimizer_peak_gb": optimizer_peak.gb, "peak_gb": peak,
                      "floor_after_release_gb": rss_gb()})
        print(f"step {step + 1}: peak {peak:.2f} GB over {len(parts)} micro-batches, "
              f"RSS after release {steps[-1]['floor_after_release_gb']:.2f} GB")
    seconds = time.perf_counter() - t0
    print(f"{args.steps} steps in {seconds:.0f} s", flush=True)
    return {"loaded_rss_gb": loaded, "steps": steps, "seconds": seconds, "peak_gb": max(s["peak_gb"] for s in steps)}


if __name__ == "__main__":
    main()
