"""`agentgym eval --env ENV --model MODEL`: success and score of a model on a task split."""

from __future__ import annotations

import argparse
import sys

from agentgym_core.commands._table import format_table


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate a model on an environment's tasks (success rate and score per category)",
        description="Roll the model out on a split and print per-category success and score, Avg@K and "
                    "Pass@K (success = the env's success flag; score = its raw reward). Writes results.json "
                    "and trajectories.jsonl to the run directory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env", required=True, help="environment name (see `agentgym envs`)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="named model, .gguf file or HF directory")
    parser.add_argument("--backend", default="transformers", help="rollout backend")
    parser.add_argument("--split", default="test", help="task split")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--n-samples", type=int, default=1, help="K samples per task (Avg@K / Pass@K)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    parser.add_argument("--max-rounds", type=int, default=20, help="turn budget per trajectory")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="per-turn generation cap")
    parser.add_argument("--num-envs", type=int, default=16, help="environment instances in flight")
    parser.add_argument("--env-url", default=None, help="evaluate against a running env server")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--out", dest="out_dir", default=None, help="run directory (default runs/eval-ENV-TIME)")
    parser.set_defaults(func=run)


def render_table(results) -> str:
    """The per-category table `agentgym eval` prints."""
    k = results.config["n_samples"]
    header = ["category", "tasks", "samples", f"success Avg@{k}", f"success Pass@{k}", f"score Avg@{k}",
              f"score Pass@{k}", "failed"]

    def row(name, m):
        return [name, m.tasks, m.samples, f"{m.success_avg:.1%}", f"{m.success_pass:.1%}", f"{m.score_avg:.3f}",
                f"{m.score_pass:.3f}", m.failed]

    rows = [row(name, m) for name, m in results.categories.items()]
    rows.append(row("ALL", results.overall))
    return format_table(header, rows)


def run(args: argparse.Namespace, stdout=None) -> int:
    from agentgym_core.evaluation import EvalConfig, evaluate

    stdout = stdout or sys.stdout
    fields = {name: getattr(args, name) for name in EvalConfig.model_fields if hasattr(args, name)}
    config = EvalConfig(**{k: v for k, v in fields.items() if v is not None or k in ("limit", "env_url")})
    results = evaluate(config)
    print(render_table(results), file=stdout)
    if results.failure_reasons:
        print("failures: " + ", ".join(f"{k}: {v}" for k, v in results.failure_reasons.items()), file=stdout)
    timing = results.timing
    print(f"{timing['trajectories_per_min']:.1f} trajectories/min, {timing['sampled_tokens'] / max(timing['gen_seconds'], 1e-9):.1f} "
          f"sampled tokens/s; results: {results.run_dir}/results.json, trajectories: {results.run_dir}/trajectories.jsonl",
          file=stdout)
    return 0
