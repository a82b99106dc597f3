"""Asynchronous rollouts with and without the off-policy correction, against synchronous, on the guess env.

Three arms, the same seed, tasks, steps and model (the example guess env, ``examples/agentgym_env_guess``):

1. ``sync``: ``rollout.max_staleness: 0`` (the correction's ``auto``: off for the learner's own module);
2. ``async_none``: ``max_staleness: 2``, ``algorithm.off_policy.correction: none``;
3. ``async_tis``: ``max_staleness: 2``, ``correction: tis`` (cap 2).

With ``--warm-start N`` the env's expert (binary search) first plays N training tasks and the model is
fine-tuned on them (SFT), so that the policy gets some reward and GRPO groups have mixed outcomes; every
arm then starts from that one checkpoint. Each arm evaluates greedily on the same held-out tasks before
(once, shared) and after training, with the paired 95% interval of after minus before and of each arm
against ``sync``, and logs per step the staleness and the learner/sampler ratio statistics
(``sampler_*``). Writes ``bench/results/off_policy_<model>.json``.

    python bench/off_policy.py                               # tiny random model: a smoke run, seconds
    python bench/off_policy.py --model smollm2-135m-instruct --warm-start 96 --steps 6 --eval-tasks 24
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
ARMS = {
    "sync": ["rollout.max_staleness=0"],
    "async_none": ["rollout.max_staleness=2", "algorithm.off_policy.correction=none"],
    "async_tis": ["rollout.max_staleness=2", "algorithm.off_policy.correction=tis"],
}
PER_STEP = ("step", "success", "reward", "staleness_mean", "staleness_max", "sampler_ratio_mean", "sampler_ratio_max",
            "sampler_ratio_over_cap", "sampler_kl", "is_weight_mean", "rollout_logprob_gap", "truncated", "time_step")


def _overrides(args: argparse.Namespace, run_dir: Path, model: str) -> list[str]:
    """The recipe every phase shares (warm start and arms): env, model, sizes, seed."""
    return [
        f"envs=[{{name: guess, env_kwargs: {{low: 1, high: {args.high}}}, max_concurrency: 4}}]",
        f"model.path={model}", "model.device=cpu", f"runtime.threads={args.threads}",
        f"trainer.run_dir={run_dir}", f"trainer.steps={args.steps}", f"trainer.eval_tasks={args.eval_tasks}",
        f"trainer.seed={args.seed}", f"trainer.save_every={args.steps}", "trainer.progress=false",
        "trainer.tensorboard=false", "trainer.save_trajectories=false",
        f"rollout.tasks_per_step={args.tasks}", f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.max_total_tokens=1024",
        f"algorithm.rounds_ctrl.rounds={args.turns}", "algorithm.kl.coef=0", f"optim.lr={args.lr}",
        # the off-policy arms are about rejected/truncated weights: the warning thresholds stay out of the way
        "algorithm.off_policy.warn_kl=null", "algorithm.off_policy.stop_kl=null",
        *args.override,
    ]


def warm_start(args: argparse.Namespace, run_root: Path) -> tuple[str, dict | None, float]:
    """SFT on the expert's episodes (read back when already done): the fine-tuned model's directory, its
    held-out evaluation (every arm's evaluation before RL) and the minutes it took."""
    from agentgym_core.finetune.run import warm_start_sft
    from agentgym_core.plugins import get_plugin_manager
    from agentgym_core.rl.config import load_config

    config = load_config(None, [
        *_overrides(args, run_root, args.model),
        f"warm_start={{expert: {{n: {args.warm_start}, max_turns: {args.turns}}}, data: {{max_tokens: 1024}}, "
        f"sft: {{epochs: {args.sft_epochs}, batch_size: 8, micro_batch_tokens: 2048}}, lr: {args.sft_lr}}}",
    ])
    t0 = time.perf_counter()
    model = tokenizer = None
    if args.model == "tiny":
        from agentgym_core.testing.tiny_model import tiny_chat_model

        model, tokenizer = tiny_chat_model(seed=args.seed)
    result = warm_start_sft(config, plugin_manager=get_plugin_manager(), model=model, tokenizer=tokenizer)
    return str(result.model_path), result.eval_after, (time.perf_counter() - t0) / 60


def run_arm(name: str, args: argparse.Namespace, run_root: Path, model_path: str, before: dict | None) -> dict:
    """One arm from ``model_path``; ``before`` is the evaluation of the starting policy (same tasks, horizon)."""
    from agentgym_core.plugins import get_plugin_manager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.trainer import train

    run_dir = run_root / name
    config = load_config(None, [*_overrides(args, run_dir, model_path), *ARMS[name]])
    model = tokenizer = None
    if model_path == "tiny":
        from agentgym_core.testing.tiny_model import tiny_chat_model

        model, tokenizer = tiny_chat_model(seed=args.seed)
    t0 = time.perf_counter()
    results = train(config, plugin_manager=get_plugin_manager(), model=model, tokenizer=tokenizer, eval_before=before)
    minutes = (time.perf_counter() - t0) / 60
    logged = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {
        "arm": name, "overrides": ARMS[name], "minutes": minutes,
        "eval_before_full": results.get("eval_before"),
        "eval_before": {k: results.get("eval_before", {}).get(k) for k in ("success", "reward", "tasks")},
        "eval_after": {k: results.get("eval_after", {}).get(k) for k in ("success", "reward", "tasks", "per_task")},
        "train": [{k: x.get(k) for k in PER_STEP} for x in logged if x["kind"] == "train"],
    }


def _paired(before: dict, after: dict) -> dict | None:
    """After minus before over the same held-out tasks, with its paired 95% interval (None under 2 tasks)."""
    from agentgym_core.evaluation.paired import paired_difference

    return paired_difference(before, after) if len(before) >= 2 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", help="'tiny' (random) or a named model / HF directory")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=4, help="tasks per step")
    parser.add_argument("--group", type=int, default=4, help="samples per task")
    parser.add_argument("--turns", type=int, default=4, help="turn budget")
    parser.add_argument("--high", type=int, default=8, help="the secret is in [1, high]")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--eval-tasks", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warm-start", type=int, default=0,
                        help="expert episodes to fine-tune on before the arms (0: the arms start from --model)")
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=1e-4)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--override", nargs="*", default=[], help="extra section.key=value overrides, every arm")
    parser.add_argument("--runs-dir", default=str(Path(tempfile.gettempdir()) / "agentgym_off_policy_runs"),
                        help="where the arms' run directories (checkpoints included) go")
    parser.add_argument("--out", default=None, help="results JSON (default bench/results/off_policy_<model>.json)")
    args = parser.parse_args()

    name = Path(args.model).name.replace(".", "_")
    out = Path(args.out) if args.out else RESULTS / f"off_policy_{name}.json"
    run_root = Path(args.runs_dir) / name
    data = {"command": "python bench/off_policy.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in
                                                               vars(args).items() if k not in ("out", "override", "arms", "runs_dir")),
            "machine": f"{platform.machine()} CPU, {args.threads} torch thread(s), shared and loaded",
            "arms": []}
    out.parent.mkdir(parents=True, exist_ok=True)
    start, before = args.model, None  # the starting policy is evaluated once (after SFT, or by the first arm)
    if args.warm_start:
        start, before, minutes = warm_start(args, run_root)
        data["warm_start"] = {"expert_episodes": args.warm_start, "minutes": minutes,
                              "eval": {k: (before or {}).get(k) for k in ("success", "reward", "tasks")}}
        print(f"warm start: held-out success {data['warm_start']['eval']['success']} | {minutes:.1f} min", flush=True)
    for name_ in args.arms:  # written after every arm, so a run cut short keeps the arms it finished
        arm = run_arm(name_, args, run_root, start, before)
        before = arm.pop("eval_before_full")
        arm["paired_vs_before"] = _paired(before["per_task"], arm["eval_after"]["per_task"])
        if data["arms"]:
            arm["paired_vs_first_arm"] = _paired(data["arms"][0]["eval_after"]["per_task"],
                                                 arm["eval_after"]["per_task"])
        data["arms"].append(arm)
        out.write_text(json.dumps(data, indent=2) + "\n")
        last = arm["train"][-1] if arm["train"] else {}
        print(f"{arm['arm']:>10}: held-out success {arm['eval_before']['success']} -> {arm['eval_after']['success']}"
              f" | last step sampler_kl {last.get('sampler_kl')}, ratio max {last.get('sampler_ratio_max')}, "
              f"over cap {last.get('sampler_ratio_over_cap')}, staleness max {last.get('staleness_max')} "
              f"| {arm['minutes']:.1f} min", flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
