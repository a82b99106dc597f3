"""`agentgym collect --env ENV --policy expert|MODEL --n N`: trajectories for SFT/DPO, as a rollout log."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "collect", help="play tasks with an environment's expert or a model and write trajectories (JSONL)",
        description="Write trajectories in the rollout-log format, with token ids and loss masks, for "
                    "`agentgym finetune` (SFT, DPO). An expert's turns are tokenised with --tokenizer's chat "
                    "template exactly as the rollout engine tokenises a model's turns.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env", required=True, help="environment name (see `agentgym envs`)")
    parser.add_argument("--policy", default="expert", help="'expert', or a model: named model, .gguf file or HF dir")
    parser.add_argument("--split", default="train", help="task split")
    parser.add_argument("--category", action="append", default=None, metavar="NAME", dest="categories",
                        help="only tasks of this catalog category (a BabyAI level, a TextCraft depth); repeatable")
    parser.add_argument("--n", type=int, default=100, help="number of tasks")
    parser.add_argument("--offset", type=int, default=0, help="skip this many tasks of the split first")
    parser.add_argument("--shuffle", action="store_true", help="seeded random task order instead of split order")
    parser.add_argument("--samples", type=int, default=1, help="trajectories per task (model policy)")
    parser.add_argument("--out", default=None, help="output JSONL (default runs/collect-ENV-TIME/trajectories.jsonl)")
    parser.add_argument("--env-url", default=None, help="play against a running `agentgym serve`")
    parser.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="constructor option of the env class (value parsed as YAML); repeatable")
    parser.add_argument("--tokenizer", default="smollm2-135m-instruct",
                        help="expert policy: model whose chat template tokenises the expert's turns")
    parser.add_argument("--max-turns", type=int, default=30, help="turn budget per trajectory")
    parser.add_argument("--temperature", type=float, default=1.0, help="model policy: sampling temperature")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="model policy: per-turn generation cap")
    parser.add_argument("--num-envs", type=int, default=8, help="model policy: environment instances in flight")
    parser.add_argument("--device", default="auto", help="model policy: auto, cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: half the CPUs, at least 1, or $OMP_NUM_THREADS; 1 is fastest when "
                             "other jobs share the CPU)")
    parser.add_argument("--seed", type=int, default=0, help="seed of task order and sampling")
    parser.add_argument("--workers", type=int, default=1,
                        help="expert policy: processes playing tasks at once, each with its own in-process "
                        "environment (not with --env-url); the same episodes in the same order as one")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml
    from pydantic import ValidationError

    from agentgym_core.env import InvalidTaskError
    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.config import CollectConfig
    from agentgym_core.finetune.experts import NoExpertError

    kwargs = {}
    for item in args.env_kwarg:
        if "=" not in item:
            print(f"error: --env-kwarg {item!r}: write it as KEY=VALUE", file=sys.stderr)
            return 2
        key, value = item.split("=", 1)
        kwargs[key] = yaml.safe_load(value)
    try:
        config = CollectConfig(
            env=args.env, policy=args.policy, split=args.split, categories=args.categories, n=args.n,
            offset=args.offset, shuffle=args.shuffle,
            samples=args.samples, out=args.out, env_url=args.env_url, env_kwargs=kwargs, tokenizer=args.tokenizer,
            max_turns=args.max_turns, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
            num_envs=args.num_envs, device=args.device, threads=args.threads, seed=args.seed,
            workers=args.workers)
    except ValidationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = collect(config)
    except (NoExpertError, InvalidTaskError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {result.trajectories} trajectories to {result.path}: {result.successes} successful "
          f"({result.success_rate:.1%}), {result.failed} failed, {result.wall_seconds:.1f}s")
    if result.failure_reasons:
        print("failures: " + ", ".join(f"{k}: {v}" for k, v in result.failure_reasons.items()))
    return 0
