"""`agentgym finetune RECIPE.yaml [key=value ...]`: SFT, DPO or rejection sampling, evaluated before/after."""

from __future__ import annotations

import argparse
import sys

from agentgym_core.commands._recipe import add_recipe_arguments, resolve_recipe


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune", help="fine-tune a policy on trajectories: SFT, DPO or rejection sampling (a YAML recipe)",
        description="Run the fine-tuning recipe in CONFIG (kind: sft | dpo | rejection_sampling; see "
                    "examples/*_sft_*.yaml). Overrides are dotted keys, e.g. sft.epochs=3 optim.lr=2e-5. Config, "
                    "metrics.jsonl and checkpoints (the RL trainer's layout; <checkpoint>/model is a Hugging Face "
                    "directory an RL run can start from) go to trainer.run_dir.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_recipe_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    from agentgym_core.recipes import ConfigError, read_recipe, show_config

    config_path, overrides = resolve_recipe(args)
    try:
        read_recipe(config_path)  # before torch is imported: a missing or unreadable recipe is reported at once
        from agentgym_core.finetune.config import load_finetune_config

        config = load_finetune_config(config_path, overrides)
    except ConfigError as exc:
        print(f"agentgym: error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(show_config(config))
        return 0

    from agentgym_core.finetune.run import run_finetune

    result = run_finetune(config, resume=args.resume is not None)
    print(f"\nrun directory: {result.run_dir}")
    print(f"trained model: {result.model_path}")
    before, after = (result.eval_before or {}).get("success"), (result.eval_after or {}).get("success")
    if before is not None or after is not None:
        fmt = lambda v: f"{100 * v:.1f}%" if isinstance(v, float) else "-"  # noqa: E731
        from agentgym_core.evaluation.run_summary import describe_sampling

        sampling = describe_sampling(config.rollout.eval_temperature, config.trainer.eval_samples)
        print(f"held-out success ({sampling}): before {fmt(before)}  after {fmt(after)}")
    for row in result.rounds:
        ev = (row.get("eval") or {}).get("success")
        print(f"  round {int(row['round'])}: kept {int(row['kept'])}/{int(row['sampled'])} sampled, "
              f"held-out success {'-' if ev is None else f'{100 * ev:.1f}%'}")
    return 0
