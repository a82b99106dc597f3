"""`agentgym finetune RECIPE.yaml [key=value ...]`: SFT, DPO or rejection sampling, evaluated before/after."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune", help="fine-tune a policy on trajectories: SFT, DPO or rejection sampling (a YAML recipe)",
        description="Run the fine-tuning recipe in CONFIG (kind: sft | dpo | rejection_sampling; see "
                    "examples/*_sft_*.yaml). Overrides are dotted keys, e.g. sft.epochs=3 optim.lr=2e-5. Config, "
                    "metrics.jsonl and checkpoints (the RL trainer's layout; <checkpoint>/model is a Hugging Face "
                    "directory an RL run can start from) go to trainer.run_dir.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("config", nargs="?", default=None,
                        help="YAML recipe (with --resume: optional, the run dir's config.yaml is used)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides key=value (values parsed as YAML)")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue the run in RUN_DIR from its latest complete checkpoint")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from agentgym_core.finetune.config import load_finetune_config
    from agentgym_core.rl.config import ConfigError

    config_path, overrides = args.config, list(args.overrides)
    if config_path is not None and "=" in config_path and not Path(config_path).exists():
        overrides.insert(0, config_path)
        config_path = None
    if args.resume:
        saved = Path(args.resume) / "config.yaml"
        if config_path is None:
            if not saved.exists():
                print(f"error: --resume {args.resume}: no config.yaml there; is it a run directory?", file=sys.stderr)
                return 2
            config_path = str(saved)
        overrides.append(f"trainer.run_dir={args.resume}")
    try:
        config = load_finetune_config(config_path, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
        return 0

    from agentgym_core.finetune.run import run_finetune

    result = run_finetune(config, resume=args.resume is not None)
    print(f"\nrun directory: {result.run_dir}")
    print(f"trained model: {result.model_path}")
    before, after = (result.eval_before or {}).get("success"), (result.eval_after or {}).get("success")
    if before is not None or after is not None:
        fmt = lambda v: f"{100 * v:.1f}%" if isinstance(v, float) else "-"  # noqa: E731
        print(f"held-out success (greedy): before {fmt(before)}  after {fmt(after)}")
    for row in result.rounds:
        ev = (row.get("eval") or {}).get("success")
        print(f"  round {int(row['round'])}: kept {int(row['kept'])}/{int(row['sampled'])} sampled, "
              f"held-out success {'-' if ev is None else f'{100 * ev:.1f}%'}")
    return 0
