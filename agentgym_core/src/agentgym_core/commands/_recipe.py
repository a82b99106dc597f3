"""Arguments shared by the recipe commands (`train`, `finetune`): a YAML recipe, overrides, resume."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", default=None,
                        help="YAML recipe (with --resume: optional, the run dir's config.yaml is used)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides key=value (values parsed as YAML)")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue the run in RUN_DIR from its latest complete checkpoint")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config (the keys the recipe states first, then the defaults "
                        "by section) and exit")


def resolve_recipe(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """The recipe path and overrides; with --resume, the run dir's saved config and run_dir.

    Raises ValueError (the CLI prints it) when no recipe is given, or --resume names a directory with
    no config.yaml.
    """
    config_path, overrides = args.config, list(args.overrides)
    if config_path is not None and "=" in config_path and not Path(config_path).exists():
        overrides.insert(0, config_path)  # `agentgym train --resume DIR key=value`
        config_path = None
    if args.resume:
        saved = Path(args.resume) / "config.yaml"
        if config_path is None:
            if not saved.exists():
                raise ValueError(f"--resume {args.resume}: no config.yaml there; is it a run directory?")
            config_path = str(saved)
        overrides.append(f"trainer.run_dir={args.resume}")
    if config_path is None:  # else the first message would be the config's `envs: Field required`
        raise ValueError("no recipe given: pass a YAML recipe, e.g. `agentgym train examples/babyai_grpo_cpu.yaml` "
                         "(the recipes in examples/ are a start), or --resume RUN_DIR to continue a run")
    return config_path, overrides
