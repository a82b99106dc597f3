"""`agentgym eval --env ENV --model MODEL`: success and score of a model on a task split."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from agentgym_core.commands._table import format_table


def json_object(text: str) -> dict:
    """``--env-kwargs``: a JSON object, or an argparse error that shows the expected form."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg}); write e.g. '{{\"max_turns\": 20}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object of options, e.g. '{{\"max_turns\": 20}}', got {text}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate a model on an environment's tasks (success rate and score per category)",
        description="Roll the model out on a split and print per-category success and score, Avg@K and "
                    "Pass@K (success = the env's success flag; score = its raw reward). Writes results.json "
                    "and trajectories.jsonl to the run directory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--from", dest="from_run", default=None, metavar="RUN_DIR_OR_RECIPE",
                        help="evaluate as a training run does: its panel, sampling settings, horizon, backend and "
                             "newest checkpoint (a recipe: its model); options typed beside it win")
    parser.add_argument("--env", default=None,
                        help="environment name (see `agentgym envs`); required unless --from names a one-env run")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="named model, .gguf file or HF directory")
    parser.add_argument("--backend", default="transformers",
                        help="rollout backend: transformers (local model) or openai (an OpenAI-compatible API)")
    parser.add_argument("--base-url", default=None,
                        help="API root for --backend openai, e.g. http://127.0.0.1:8001/v1 (see `agentgym serve-model`)")
    parser.add_argument("--api-key", default=None, help="API key for --backend openai (default: $OPENAI_API_KEY)")
    parser.add_argument("--request-timeout", dest="request_timeout_s", type=float, default=None,
                        help="limit in seconds on one API request (--backend openai)")
    parser.add_argument("--split", default="test", help="task split")
    parser.add_argument("--category", action="append", default=None, metavar="NAME", dest="categories",
                        help="only tasks of this catalog category (a BabyAI level, a TextCraft depth); repeatable")
    parser.add_argument("--limit", type=int, default=None,
                        help="only N tasks, taken round-robin across the split's categories")
    parser.add_argument("--env-kwargs", dest="env_options", type=json_object, default=None,
                        help='JSON object of environment constructor options, e.g. \'{"max_turns": 20}\'')
    parser.add_argument("--action-format", choices=("text", "tool_call"), default="text",
                        help="how the model's replies carry actions: an `Action:` line, or a call of the `act` tool "
                             "whose JSON schema the prompt gives (a recipe's envs entry action_format)")
    parser.add_argument("--n-samples", type=int, default=1, help="K samples per task (Avg@K / Pass@K)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    parser.add_argument("--constrain-actions", action="store_true", default=None,
                        help="sample each reply's action from the environment's available actions alone (a recipe's "
                             "rollout.constrain_actions)")
    parser.add_argument("--max-rounds", type=int, default=20, help="turn budget per trajectory")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="per-turn generation cap")
    parser.add_argument("--num-envs", type=int, default=16, help="environment instances in flight")
    parser.add_argument("--env-url", default=None, help="evaluate against a running env server")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda (local backends)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: half the CPUs, at least 1, or $OMP_NUM_THREADS; 1 is fastest when "
                             "other jobs share the CPU)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--include-tokens", action="store_true",
                        help="also log token ids, loss mask and log-probs (the viewer's token view; ~3x larger log)")
    parser.add_argument("--out", dest="out_dir", default=None, help="run directory (default runs/eval-ENV-TIME)")
    parser.add_argument("--resume", action="store_true",
                        help="finish an interrupted evaluation in --out: play only the tasks its trajectories.jsonl "
                             "does not hold yet (the other settings must be the same)")
    parser.set_defaults(func=run, defaults={a.dest: a.default for a in parser._actions})  # noqa: SLF001


def resume_command(run_dir: str, argv: list[str] | None = None) -> str:
    """The command that finishes an interrupted evaluation: the one typed, with ``--out DIR --resume``."""
    argv = sys.argv if argv is None else argv
    if len(argv) > 1 and os.path.basename(argv[0]) in ("agentgym", "cli.py") and "eval" in argv[1:]:
        words, skip = [], False
        for word in argv[1:]:
            if skip:
                skip = False
            elif word == "--out":
                skip = True
            elif not word.startswith("--out=") and word != "--resume":
                words.append(word)
        return "agentgym " + shlex.join([*words, "--out", run_dir, "--resume"])
    return f"the same `agentgym eval` command with --out {shlex.quote(run_dir)} --resume"


def render_table(results) -> str:
    """The per-category table `agentgym eval` prints."""
    k = results.config["n_samples"]
    header = ["category", "tasks", "samples", f"success Avg@{k}", f"success Pass@{k}", "invalid actions",
              f"score Avg@{k}", f"score Pass@{k}", "failed"]

    def row(name, m):
        invalid = "-" if m.invalid_action_rate is None else f"{m.invalid_action_rate:.1%}"  # the env does not say
        return [name, m.tasks, m.samples, f"{m.success_avg:.1%}", f"{m.success_pass:.1%}", invalid,
                f"{m.score_avg:.3f}", f"{m.score_pass:.3f}", m.failed]

    rows = [row(name, m) for name, m in results.categories.items()]
    rows.append(row("ALL", results.overall))
    return format_table(header, rows)


def run(args: argparse.Namespace, stdout=None) -> int:
    from agentgym_core.evaluation import EvalConfig, EvalInterrupted, evaluate
    from agentgym_core.rollout.text_engine import ChatBackendError

    stdout = stdout or sys.stdout
    fields = {name: getattr(args, name) for name in EvalConfig.model_fields if hasattr(args, name)}
    if getattr(args, "from_run", None) is not None:
        from agentgym_core.recipes import ConfigError
        from agentgym_core.rl.eval_from_run import eval_config_from_run

        defaults = getattr(args, "defaults", {})
        typed = {k: v for k, v in fields.items() if k != "env" and k in defaults and v != defaults[k]}
        try:
            config = eval_config_from_run(args.from_run, env=args.env, overrides=typed)
        except ConfigError as exc:
            print(f"agentgym: error: {exc}", file=sys.stderr)
            return 2
    elif args.env is None:
        print("agentgym: error: name the environment with --env ENV (see `agentgym envs`), or evaluate as a "
              "training run does with --from RUN_DIR", file=sys.stderr)
        return 2
    else:
        config = EvalConfig(**{k: v for k, v in fields.items() if v is not None or k in ("limit", "env_url")})
    try:
        results = evaluate(config)
    except ChatBackendError as exc:  # the API refused the setup (unknown model, bad key) before any episode
        print(f"agentgym: error: {exc}", file=sys.stderr)
        return 2
    except EvalInterrupted as stop:
        print(f"interrupted: {stop.kept} of {stop.total} trajectories finished and are kept in "
              f"{stop.run_dir / 'trajectories.jsonl'}; to finish the rest, run: {resume_command(str(stop.run_dir))}",
              file=sys.stderr)
        return 130
    print(render_table(results), file=stdout)
    if results.failure_reasons:
        print("failures: " + ", ".join(f"{k}: {v}" for k, v in results.failure_reasons.items()), file=stdout)
        examples: dict[str, str] = {}
        for row in results.per_task:  # one full reason per kind, so the cause is on screen
            reason = row.get("failure_reason") or ""
            examples.setdefault(reason.split(":")[0], reason)
        for reason in examples.values():
            if reason:
                print(f"  e.g. {reason}", file=stdout)
    if not results.trainable:
        print("(text-only backend: trajectories carry no token ids and are for evaluation only)", file=stdout)
    timing = results.timing
    print(f"{timing['trajectories_per_min']:.1f} trajectories/min, {timing['sampled_tokens'] / max(timing['gen_seconds'], 1e-9):.1f} "
          f"sampled tokens/s; results: {results.run_dir}/results.json, trajectories: {results.run_dir}/trajectories.jsonl",
          file=stdout)
    if results.per_task and results.overall.failed == results.overall.samples:
        return 1  # nothing was measured: every trajectory failed
    return 0
