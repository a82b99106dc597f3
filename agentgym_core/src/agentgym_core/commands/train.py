"""`agentgym train RECIPE.yaml [key=value ...]`: online multi-turn RL, evaluated before and after."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

from agentgym_core.commands._recipe import add_recipe_arguments, resolve_recipe
from agentgym_core.commands._report import report_setup_error, under_torchrun


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train an agent with multi-turn RL from a YAML recipe",
        description="Train the policy in CONFIG (see examples/*.yaml): online RL, or SFT / DPO / rejection "
                    "sampling when the recipe says `kind: sft|dpo|rejection_sampling` (as `agentgym finetune`). "
                    "Overrides are dotted keys, e.g. "
                    "trainer.steps=20 algorithm.kl.coef=0.01 'algorithm.rounds_ctrl.rounds=[6,13,20]'. "
                    "The resolved config, metrics.jsonl, trajectories and checkpoints go to trainer.run_dir.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_recipe_arguments(parser)
    parser.set_defaults(func=run)


def _success_table(results: dict) -> str:
    """Held-out success and invalid-action rate per environment: before/after RL, with base and after-SFT
    columns after a warm start."""
    columns = [("base", "eval_base"), ("sft", "eval_sft")] if results.get("eval_sft") else [("before", "eval_before")]
    columns.append(("after", "eval_after"))
    evals = [results.get(key) or {} for _, key in columns]
    keys = sorted({k for e in evals for k in e if k.endswith(("success", "invalid_action_rate"))})
    if not keys:
        return ""
    fmt = lambda v: f"{100 * v:7.1f}%" if isinstance(v, float) else f"{'-':>8}"  # noqa: E731
    rows = [f"{'metric':<32} " + " ".join(f"{name:>8}" for name, _ in columns) + f" {'change':>8}"]
    for k in keys:
        values = [e.get(k) for e in evals]
        first, last = values[0], values[-1]
        delta = f"{100 * (last - first):+7.1f}" if isinstance(first, float) and isinstance(last, float) else f"{'-':>8}"
        rows.append(f"{k:<32} " + " ".join(fmt(v) for v in values) + f" {delta}")
    return "\n".join(rows)


def check_envs(config, *, reach_servers: bool = True) -> None:
    """Each env's server answers (``url``) or its class takes the recipe's ``env_kwargs``; else a one-line error.

    ``reach_servers=False`` (``--print-config``) checks only what needs no server: names and options.
    """
    from agentgym_core.env import check_env_options
    from agentgym_core.http.client import EnvClient
    from agentgym_core.plugins import get_plugin_manager

    for index, env in enumerate(config.envs):
        if env.protocol == "openenv":
            if reach_servers:
                from agentgym_core.http.openenv_remote import check_openenv_server

                for url in env.server_urls:
                    check_openenv_server(url)
        elif env.url:
            if not reach_servers:
                continue
            client = EnvClient(env.url, timeout=10.0, retries=1)
            try:
                client.health()
                if env.categories:
                    _check_categories(client.tasks(), env, index)
            finally:
                client.close()
        else:
            env_class = get_plugin_manager().env_class(env.name)
            check_env_options(env_class, env.env_kwargs, where=f"envs[{index}].env_kwargs")
            if env.categories:
                _check_categories(env_class.tasks(), env, index)


def _check_categories(catalog, env, index: int) -> None:
    """``envs[i].categories`` name categories of the catalog that hold tasks of both splits; else a ValueError."""
    from agentgym_core.env import InvalidTaskError

    try:
        for split in (env.train_split, env.test_split):
            catalog.in_categories(catalog.split(split), env.categories, what=f"{split} tasks")
    except InvalidTaskError as exc:
        raise ValueError(f"envs[{index}].categories: {exc}") from None


def run(args: argparse.Namespace) -> int:

    from agentgym_core.recipes import ConfigError, recipe_kind, show_config

    config_path, overrides = resolve_recipe(args)
    try:  # before torch is imported: a missing or unreadable recipe is reported at once
        kind = recipe_kind(config_path, overrides)
    except ConfigError as exc:
        report_setup_error(exc)
        return 2
    if kind != "rl":  # one entry point for every trainer; finetune reads the same arguments
        from agentgym_core.commands import finetune

        return finetune.run(args)
    overrides = [o for o in overrides if not o.startswith("kind=")]  # `kind=rl` only chose the trainer
    from agentgym_core.plugins import get_plugin_manager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.plugin_options import bind_plugin_options

    try:
        # The estimator and scheduler must exist and take the recipe's options, even for --print-config.
        config = bind_plugin_options(load_config(config_path, overrides), get_plugin_manager())
    except ConfigError as exc:
        report_setup_error(exc)
        return 2
    if config.trainer.launcher == "ray" and importlib.util.find_spec("ray") is None:  # before any phase runs
        report_setup_error("trainer.launcher=ray needs Ray, which is not installed: pip install './agentgym_core[ray]' "
                           "(or pip install ray), or set trainer.launcher=local")
        return 2
    started = int(os.environ.get("WORLD_SIZE", "1"))
    if under_torchrun() and started != config.trainer.learners:  # before the warm start and the model load
        report_setup_error(f"torchrun started {started} ranks but trainer.learners={config.trainer.learners}: set "
                           f"trainer.learners={started}, or start {config.trainer.learners} ranks (--nproc-per-node "
                           "times --nnodes)")
        return 2
    if args.print_config:  # a recipe that prints must be one that runs: the same env names and options
        check_envs(config, reach_servers=False)
        print(show_config(config))
        return 0
    check_envs(config)  # before the model loads: a typo or a dead server fails in a second, in one line
    config.model.check_present()  # a model this machine lacks: one line, before the imports below load torch
    from agentgym_core.pipeline import run_rl_recipe
    from agentgym_core.rl.distributed import RankFailedError
    from agentgym_core.rl.guards import RunStopped

    try:
        results = run_rl_recipe(config, resume=args.resume is not None)
    except RunStopped as exc:  # a check found the run unsound: one line that says why
        print(f"agentgym: run stopped: {exc}", file=sys.stderr)
        return 1
    except RankFailedError as exc:  # one spawned learner rank failed: its error once, not one traceback per rank
        print(f"agentgym: error: {exc}", file=sys.stderr)
        return 1
    if os.environ.get("RANK", "0") != "0":  # under torchrun every rank runs this command: rank 0 reports
        return 0
    table = _success_table(results)
    print(f"\nrun directory: {config.trainer.run_dir}")
    if table:
        from agentgym_core.evaluation.run_summary import describe_sampling

        sampling = describe_sampling(config.rollout.eval_temperature, config.trainer.eval_samples)
        print(f"held-out success and invalid-action rate ({sampling}):\n" + table)
    print(_run_summary(results, Path(config.trainer.run_dir)))
    return 0


def _run_summary(results: dict, run_dir: Path) -> str:
    """The paired change, the invalid-action rates, the updates that ran and any warning: printed, and
    written to ``summary.json`` in the run directory."""
    from agentgym_core.evaluation.run_summary import format_summary, summarize_run

    log = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    summary = summarize_run(results, rows)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return format_summary(summary)
