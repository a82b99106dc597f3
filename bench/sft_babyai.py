"""Does SFT on BabyAI expert trajectories raise SmolLM2-135M's held-out success? (CPU-sized.)

1. ``agentgym collect``'s library call: the BabyAI expert (minigrid's bot with one-step lookahead,
   :mod:`agentgym_core.finetune.experts`) plays ``--train-tasks`` shuffled training tasks; its
   turns are tokenised with SmolLM2's chat template exactly as the rollout engine would.
2. ``run_sft``: a seeded sample of ``--examples`` successful trajectories (at most ``--max-tokens``
   tokens each: on a shared 2-core CPU the forward/backward runs at ~40 tokens/s), loss on the
   assistant tokens only, packed; greedy evaluation on the first ``--eval-tasks`` held-out test
   tasks before and after, through the RL trainer's own evaluation.

Writes bench/results/sft_babyai.json (+ the run directory bench/results/sft_babyai/).

    python bench/sft_babyai.py --train-tasks 300 --examples 48 --epochs 1 --eval-tasks 40
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-tasks", type=int, default=300, help="training tasks the expert plays")
    parser.add_argument("--expert-max-turns", type=int, default=12, help="turn budget of an expert episode")
    parser.add_argument("--examples", type=int, default=48, help="successful expert trajectories trained on")
    parser.add_argument("--max-tokens", type=int, default=900, help="longest trajectory kept (tokens)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters instead of all weights")
    parser.add_argument("--eval-tasks", type=int, default=40, help="first N held-out test tasks")
    parser.add_argument("--eval-max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mixed-precision", default="auto", choices=["no", "bf16", "auto"],
                        help="bf16 autocast of the SFT forward/backward (model.mixed_precision)")
    parser.add_argument("--data", default=None, help="use this expert JSONL instead of collecting")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-eval-before", action="store_true",
                        help="skip the base model's evaluation (deterministic: greedy, same tasks and seed)")
    parser.add_argument("--reuse-data", action="store_true", help="keep an existing expert.jsonl instead of collecting")
    args = parser.parse_args()

    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.common import select_examples
    from agentgym_core.finetune.config import CollectConfig, FinetuneConfig
    from agentgym_core.finetune.data import load_examples
    from agentgym_core.finetune.sft import run_sft

    out_dir = RESULTS / "sft_babyai"
    out_dir.mkdir(parents=True, exist_ok=True)
    data = Path(args.data) if args.data else out_dir / "expert.jsonl"
    t0 = time.perf_counter()
    if (args.reuse_data or args.data) and data.exists():
        records = [json.loads(x) for x in data.read_text().splitlines() if x.strip()]
        expert_success, expert_n = sum(r["success"] for r in records) / len(records), len(records)
    else:
        data.unlink(missing_ok=True)
        collected = collect(CollectConfig(env="babyai", policy="expert", n=args.train_tasks, shuffle=True,
                                          seed=args.seed, max_turns=args.expert_max_turns, out=str(data)),
                            progress=False)
        expert_success, expert_n = collected.success_rate, collected.trajectories
    collect_s = time.perf_counter() - t0
    print(f"expert: {expert_success:.1%} of {expert_n} successful ({collect_s:.0f}s)")

    config = FinetuneConfig.model_validate({
        "kind": "sft",
        "model": {"path": "smollm2-135m-instruct", "lora": {"enabled": args.lora},
                  "mixed_precision": args.mixed_precision},
        "runtime": {"threads": args.threads},
        "envs": [{"name": "babyai", "max_concurrency": 16}],
        "rollout": {"max_new_tokens": args.max_new_tokens, "max_total_tokens": 4096, "eval_temperature": 0.0},
        "data": {"paths": [str(data)], "max_tokens": args.max_tokens, "only_successful": True},
        "sft": {"epochs": args.epochs, "batch_size": args.batch_size, "micro_batch_tokens": 4096},
        "optim": {"lr": args.lr},
        "trainer": {"run_dir": str(out_dir / "run"), "progress": False, "eval_before": not args.no_eval_before, "seed": args.seed, "eval_tasks": args.eval_tasks,
                    "eval_max_turns": args.eval_max_turns, "save_every": 1000},
    })
    # A seeded sample of the short enough successes (every level that has some keeps its share).
    examples = select_examples(load_examples(data), config.data)
    examples = random.Random(args.seed).sample(examples, min(args.examples, len(examples)))
    print(f"training on {len(examples)} trajectories, {sum(len(e.token_ids) for e in examples)} tokens, "
          f"{sum(e.num_trained_tokens for e in examples)} trained")
    t1 = time.perf_counter()
    result = run_sft(config, examples=examples)
    report = {
        "command": "python bench/sft_babyai.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "expert_success": expert_success, "expert_trajectories": expert_n,
        "examples": len(examples), "trained_tokens": sum(e.num_trained_tokens for e in examples),
        "total_tokens": sum(len(e.token_ids) for e in examples),
        "before": result.eval_before, "after": result.eval_after, "final_train": result.final,
        "checkpoint": str(result.checkpoint), "minutes_collect": collect_s / 60,
        "minutes_sft_and_eval": (time.perf_counter() - t1) / 60,
    }
    (RESULTS / "sft_babyai.json").write_text(json.dumps(report, indent=2, default=str))
    before = (result.eval_before or {}).get("success")
    after = (result.eval_after or {}).get("success")
    print(f"held-out success on {args.eval_tasks} test tasks (greedy, {args.eval_max_turns} turns): "
          f"before {before}  after {after}  ({report['minutes_sft_and_eval']:.1f} min)")


if __name__ == "__main__":
    main()
