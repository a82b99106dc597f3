"""The `agentgym` command. Each subcommand is a module of `agentgym_core.commands`.

A command module defines ``add_parser(subparsers)`` (which sets ``func=run`` as a default) and
``run(args) -> int``. Modules are discovered, so adding a command never edits this file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from agentgym_core import commands
from agentgym_core.commands._report import SETUP_ERRORS, report_setup_error

EPILOG = """\
examples:
  agentgym plugins                      what is installed, and what failed to load
  agentgym envs                         environments with their split sizes
  agentgym serve babyai --port 8000     serve BabyAI over HTTP on 127.0.0.1
  agentgym play babyai --task 3         play a task yourself in the terminal
  agentgym eval --env babyai --model smollm2-135m-instruct --split test --limit 20
  agentgym train examples/babyai_grpo_cpu.yaml
  agentgym serve-model smollm2-135m-instruct --port 8001   OpenAI-compatible API
  agentgym view runs/my_run                                 replay a run in the browser

CPU threads: torch uses half the CPUs this process may run on (at least 1) unless you set
OMP_NUM_THREADS, --threads N (eval, collect, serve-model) or runtime.threads: N (train).
"""


def default_threads() -> int:
    """torch's CPU threads when nothing sets them: half the CPUs this process may use, at least 1.

    torch's own default is one thread per core; when another job holds a core, those threads wait
    for each other at every operator (measured in bench/README.md, "CPU threads").
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` only where it says something: not after a help text that already names
    its default (``(default: $OPENAI_API_KEY)``), and not ``None``, ``[]`` or a flag's ``True``/``False``."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.default is None or action.default == [] or action.nargs == 0:
            return text
        return super()._get_help_string(action)


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser of each subcommand of ``parser``, by name."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _readable_defaults(parser: argparse.ArgumentParser) -> None:
    """Every subcommand that asked for argparse's defaults formatter gets :class:`DefaultsHelpFormatter`."""
    for sub in subcommand_parsers(parser).values():
        if sub.formatter_class is argparse.ArgumentDefaultsHelpFormatter:
            sub.formatter_class = DefaultsHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentgym",
        description="Train and evaluate LLM agents with multi-turn reinforcement learning.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="logging verbosity (default: %(default)s)")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
        module.add_parser(subparsers)
    _readable_defaults(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", str(default_threads()))  # read by torch when it is first imported
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]  # `train R.yaml --print-config key=value`: still overrides
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SETUP_ERRORS as exc:  # one line that says the fix
        report_setup_error(exc)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
