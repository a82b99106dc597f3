"""Does training make SmolLM2-135M better at BabyAI on this CPU? Held-out success: base, SFT, SFT+RL.

One run of the README's recipe (examples/babyai_grpo_cpu.yaml), in two arms of equal RL budget:

1. ``scaling_inter``: the recipe as shipped: warm start (the BabyAI expert plays ``--expert-tasks``
   training tasks; SFT on its successful episodes), then GRPO with the turn horizon growing in
   stages (ScalingInter-RL, ``--rounds``).
2. ``fixed``: GRPO from the same SFT weights, same steps, tasks, samples and seed, with the longest
   horizon from the first step.

Every evaluation is greedy, on the same held-out test tasks (round-robin over the levels, as
``agentgym eval --limit N`` takes them) with the same final horizon, so the figures compare:
base model -> after SFT -> after SFT+RL (each arm), and the arms with each other (paired over tasks)
at the RL steps each ran: equal in one invocation; arms run separately (``--from-sft``, ``--resume``)
and merged with ``--combine`` may differ, and the summary prints both counts. The fixed arm
interacts more per step (every episode may run to the longest horizon), so ``--match-env-steps``
then also evaluates it at its saved checkpoint whose environment steps in training come closest to
the ScalingInter arm's total: the comparison at equal interaction; ``--match-wall-time`` does the same with
the time its RL steps took: the comparison at equal wall time (run the arms under the same conditions for it).
Writes bench/results/learn_babyai.json and, with matplotlib (``pip install -e .[bench]``),
bench/results/learn_babyai.png: training success and reward per step of both arms, and success
against environment steps, with the held-out evaluations marked.

    python bench/learn_babyai.py                    # the defaults: about 75 min on the 2-core CPU
    python bench/learn_babyai.py --steps 4 --eval-tasks 8 --expert-tasks 100   # a quick look
    python bench/learn_babyai.py --steps 16 --eval-tasks 120 --override trainer.save_every=4 \
        --out bench/results/learn_babyai_vs_fixed.json         # both arms, checkpoints every 4 steps
    python bench/learn_babyai.py --eval-tasks 120 --override trainer.save_every=4 \
        --match-env-steps bench/results/learn_babyai_vs_fixed.json   # + the fixed arm at equal env steps
    python bench/learn_babyai.py --eval-tasks 120 --override trainer.save_every=4 \
        --match-wall-time bench/results/learn_babyai_vs_fixed.json   # + the fixed arm at equal wall time
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: the results JSON name paths relative to it
RESULTS = Path(__file__).parent / "results"
EXAMPLES = ROOT / "examples"
TITLES = {"babyai": "BabyAI", "textcraft": "TextCraft", "textworld": "TextWorld",
          "reasoning_gym": "reasoning-gym"}


def run_arm(name: str, args: argparse.Namespace, overrides: list[str]) -> dict:
    from agentgym_core.pipeline import run_rl_recipe as train
    from agentgym_core.plugins import get_plugin_manager
    from agentgym_core.rl.config import load_config

    run_dir = RESULTS / f"learn_{args.env}" / name
    config = load_config(args.recipe, [
        f"trainer.run_dir={run_dir}", f"trainer.steps={args.steps}", f"trainer.eval_tasks={args.eval_tasks}",
        f"trainer.seed={args.seed}", f"trainer.save_every={args.steps}", "trainer.progress=true",
        # every saved checkpoint stays: --match-env-steps and --match-wall-time evaluate earlier ones
        f"trainer.keep_checkpoints={max(2, args.steps)}",
        *overrides, *args.override,
    ])
    t0 = time.perf_counter()
    # --resume continues the arms that started; one that had not yet starts now (e.g. the second of two arms)
    results = train(config, plugin_manager=get_plugin_manager(), resume=args.resume and run_dir.is_dir())
    minutes = (time.perf_counter() - t0) / 60
    logged = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    curve = [x for x in logged if x["kind"] == "train"]
    warm = run_dir / "warm_start" / "metrics.jsonl"
    sft_minutes = None
    if warm.exists():
        sft_steps = [json.loads(x) for x in warm.read_text().splitlines() if '"train"' in x]
        sft_minutes = sum(x["time_step"] for x in sft_steps) / 60
    return {
        "arm": name, "minutes": minutes, "sft_update_minutes": sft_minutes,
        "eval_base": _pick(results.get("eval_base")), "eval_sft": _pick(results.get("eval_sft")),
        "eval_before": _pick(results.get("eval_before")), "eval_after": _pick(results.get("eval_after")),
        "train": [{k: x.get(k) for k in ("step", "success", "reward", "turns", "horizon", "kl", "time_step",
                                         "time_rollout", "update_seconds", "update_tokens_per_s", "trajectories",
                                         "trained_trajectories", "skipped_update", "invalid_action_rate")}
                  for x in curve],
        "env_steps": env_steps(run_dir),
        "config": _repo_relative(run_dir / "config.yaml"),
        "rl_checkpoint": _repo_relative(max((run_dir / "checkpoints").glob("step_*"), default=run_dir)),
    }


def env_steps(run_dir: Path) -> dict[str, float]:
    """RL step -> environment steps taken in training up to the end of that step (turns x trajectories of
    every step so far), from the run's metrics log; a step logged twice (a resumed run) counts once."""
    per_step: dict[int, float] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if row.get("kind") == "train" and row.get("trajectories") is not None:
            per_step[int(row["step"])] = row["turns"] * row["trajectories"]
    return _running_total(per_step)


def evaluate_checkpoint(args: argparse.Namespace, arm: dict, step: int) -> dict:
    """Greedy held-out evaluation of ``arm``'s step-``step`` checkpoint on the tasks and horizon of the
    arms' evaluations: the trainer's own evaluation before RL, in a run that then stops (no step)."""
    from agentgym_core.pipeline import run_rl_recipe as train
    from agentgym_core.plugins import get_plugin_manager
    from agentgym_core.rl.config import load_config

    arm_dir = _arm_dir(arm)
    model = arm_dir / "checkpoints" / f"step_{step:06d}" / "model"
    if not model.is_dir():
        raise SystemExit(f"{model} is missing: run with --override trainer.save_every=N so that step {step} is saved")
    run_dir = arm_dir.parent / f"{arm['arm']}_step{step}_eval"
    config = load_config(args.recipe, [
        f"trainer.run_dir={run_dir}", f"trainer.eval_tasks={args.eval_tasks}", f"trainer.seed={args.seed}",
        "trainer.progress=true", "trainer.eval_before=true", "warm_start=null", f"model.path={model}",
        *args.override,
    ])
    # an evaluation cut short before keeps the episodes it played (its run directory holds them)
    results = train(config, plugin_manager=get_plugin_manager(), stop_after=0,
                    resume=(run_dir / "evaluations").is_dir())
    return _pick(results["eval_before"])


def train_seconds(row: dict) -> dict[str, float]:
    """RL step -> seconds the arm's RL steps took up to the end of that step (the sum of their ``time_step``),
    from its results row; a step logged twice (a resumed run) counts once, its last row standing. Comparable
    between arms that ran under the same conditions (alone, or side by side on one thread each)."""
    return _running_total({int(x["step"]): x.get("time_step") or 0.0 for x in row["train"]})


def _running_total(per_step: dict[int, float]) -> dict[str, float]:
    """Step -> the sum of ``per_step`` up to and including that step (keys as strings: the JSON's)."""
    total, out = 0.0, {}
    for step in sorted(per_step):
        total += per_step[step]
        out[str(step)] = total
    return out


# what a later arm is matched on -> (the key of its evaluation there, the figure per step, its words)
MATCHES = {
    "env_steps": ("at_matched_env_steps", lambda row: row["env_steps"], "environment steps"),
    "train_seconds": ("at_matched_wall_time", train_seconds, "seconds of RL steps"),
}


def closest_checkpoint(saved: list[int], taken: dict[str, float], budget: float) -> int:
    """The saved step whose ``taken`` (environment steps, or seconds, in training) comes closest to ``budget``
    (the earlier on a tie)."""
    return min(sorted(saved), key=lambda k: abs(taken[str(k)] - budget))


def match_checkpoints(args: argparse.Namespace, report: list[dict], measure: str) -> None:
    """Every arm after the first, also at its saved checkpoint whose ``measure`` (``env_steps``: environment
    steps in training, a comparison at equal interaction; ``train_seconds``: time of its RL steps, at equal
    wall time) comes closest to the first arm's total, beside the comparison at equal RL steps. A checkpoint
    already evaluated for the other measure is not evaluated again."""
    from agentgym_core.evaluation.paired import paired_difference

    key, per_step, _ = MATCHES[measure]
    first = report[0]
    budget = max(per_step(first).values())
    for row in report[1:]:
        arm_dir = _arm_dir(row)
        saved = sorted(int(p.name.split("_")[1]) for p in (arm_dir / "checkpoints").glob("step_*"))
        if not saved:
            raise SystemExit(f"{arm_dir}/checkpoints holds no checkpoint")
        taken = per_step(row)
        step = closest_checkpoint(saved, taken, budget)
        done = row.get(key) or {}
        if done.get("step") != step:
            known = [m for m in (row.get(k) for k, _, _ in MATCHES.values()) if m and m.get("step") == step]
            done = {"step": step, measure: taken[str(step)], f"first_arm_{measure}": budget,
                    "eval": (row["eval_after"] if step == _last_step(row) else
                             known[0]["eval"] if known else evaluate_checkpoint(args, row, step))}
        done["paired_vs_first_arm"] = paired_difference(first["eval_after"]["per_task"], done["eval"]["per_task"])
        row[key] = done


def _with_env_steps(report: list[dict]) -> list[dict]:
    """``report``, each arm with its environment steps (results written before they were recorded: read
    from the arm's metrics log)."""
    for row in report:
        if not row.get("env_steps"):
            row["env_steps"] = env_steps(_arm_dir(row))
    return report


def _last_step(row: dict) -> int:
    """The last RL step the arm whose results are ``row`` trained (0: none)."""
    return row["train"][-1]["step"] if row["train"] else 0


def _arm_dir(row: dict) -> Path:
    """The run directory of the arm whose results are ``row`` (its config is saved there)."""
    return ROOT / Path(row["config"]).parent


def _pick(evaluation: dict | None) -> dict | None:
    """The evaluation's figures kept in the results JSON."""
    if not evaluation:
        return None
    kept = ("success", "invalid_action_rate", "reward", "turns", "tasks", "horizon", "per_task")
    return {k: evaluation[k] for k in kept if k in evaluation}


def _repo_relative(path: Path) -> str:
    """``path`` relative to the checkout (the JSON is committed: no machine's absolute paths in it), also where
    a results folder is a link to another disk (its links are not followed)."""
    try:
        return str(Path(os.path.abspath(path)).relative_to(ROOT))
    except ValueError:
        return str(path)


def plot(report: list[dict], path: Path, title: str) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_env_steps = all(row.get("env_steps") for row in report)
    fig, axes = plt.subplots(1, 3 if with_env_steps else 2, figsize=(16 if with_env_steps else 11, 4))
    for row in report:
        steps = [x["step"] for x in row["train"]]
        for ax, key in zip(axes, ("success", "reward"), strict=False):
            line, = ax.plot(steps, [x[key] for x in row["train"]], marker=".", label=f"{row['arm']} (train)")
            ax.scatter([0, steps[-1] if steps else 0],
                       [row["eval_before"][key] if row["eval_before"] else float("nan"),
                        row["eval_after"][key] if row["eval_after"] else float("nan")],
                       marker="s", color=line.get_color(), label=f"{row['arm']} (held-out)")
        if with_env_steps:  # the same training success against the interaction it cost
            taken = [row["env_steps"].get(str(k), float("nan")) for k in steps]
            line, = axes[2].plot(taken, [x["success"] for x in row["train"]], marker=".", label=f"{row['arm']} (train)")
            held = [(0.0, row["eval_before"]), (taken[-1] if taken else 0.0, row["eval_after"])]
            for key, _, _ in MATCHES.values():  # each matched checkpoint, at the environment steps it took
                if row.get(key):
                    held.append((row["env_steps"].get(str(row[key]["step"]), float("nan")), row[key]["eval"]))
            axes[2].scatter([x for x, e in held if e], [e["success"] for _, e in held if e], marker="s",
                            color=line.get_color(), label=f"{row['arm']} (held-out)")
    base = report[0].get("eval_base")
    for ax, key in zip(axes, ("success", "reward", "success"), strict=False):
        if base:
            ax.axhline(base[key], color="grey", linestyle="--", label="base model (held-out)")
        ax.set_xlabel("RL step (after the SFT warm start)")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    if with_env_steps:
        axes[2].set_xlabel("environment steps in training")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"SmolLM2-135M on {title}, CPU: RL after SFT (arms: {', '.join(r['arm'] for r in report)})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(env: str = "babyai", doc: str | None = None) -> None:
    parser = argparse.ArgumentParser(description=doc or __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(env=env)
    parser.add_argument("--recipe", default=str(EXAMPLES / f"{env}_grpo_cpu.yaml"))
    parser.add_argument("--steps", type=int, default=None, help="RL steps per arm (default: the recipe's)")
    parser.add_argument("--eval-tasks", type=int, default=20, help="held-out test tasks per evaluation")
    parser.add_argument("--rounds", default=None, help="ScalingInter stages, e.g. 4,8 (default: the recipe's); "
                        "the fixed arm uses the last")
    parser.add_argument("--expert-tasks", type=int, default=None, help="warm start: expert episodes collected")
    parser.add_argument("--stage-steps", type=int, default=None,
                        help="RL steps per ScalingInter stage (default: --steps split evenly over the stages)")
    parser.add_argument("--resume", action="store_true",
                        help="continue each arm's run from its last checkpoint (e.g. with a larger --steps and the "
                        "first run's --stage-steps, so the schedule stays the same); its evaluations are read back, "
                        "one cut short keeps the episodes it played, and an arm not started yet starts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="scaling_inter,fixed")
    parser.add_argument("--override", action="append", default=[], help="extra dotted recipe override")
    parser.add_argument("--out", default=str(RESULTS / f"learn_{env}.json"), help="results JSON (PNG next to it)")
    parser.add_argument("--from-sft", default=None, metavar="JSON",
                        help="no warm start: every arm starts from the SFT checkpoint of the earlier run whose results "
                        "JSON this is, and that run's evaluation after SFT stands for this run's (same weights and "
                        "tasks), so RL settings can be compared on one start")
    parser.add_argument("--label", default=None,
                        help="prefix of the arms' names and run directories (default: none), e.g. to keep a run "
                        "with other settings beside the first")
    parser.add_argument("--combine", nargs="+", default=None, metavar="JSON",
                        help="no training: merge the arms of earlier runs' JSON files (arms run as separate "
                        "processes, e.g. side by side) into --out, its PNG and the summary table")
    parser.add_argument("--match-env-steps", default=None, metavar="JSON",
                        help="no training: in this earlier run's results JSON (its --eval-tasks and --override "
                        "too), evaluate every arm after the first also at its saved checkpoint closest to the first "
                        "arm's total environment steps in training (e.g. fixed 8 turns against ScalingInter's "
                        "4 -> 8), and write the comparison back into it")
    parser.add_argument("--match-wall-time", default=None, metavar="JSON",
                        help="as --match-env-steps, at the saved checkpoint whose RL steps took closest to the first "
                        "arm's total time: a comparison at equal wall time (fair when the arms ran under the same "
                        "conditions: one after the other alone, or side by side on one thread each)")
    args = parser.parse_args()
    for earlier_run, measure in ((args.match_env_steps, "env_steps"), (args.match_wall_time, "train_seconds")):
        if earlier_run:
            out = Path(earlier_run)
            run = json.loads(out.read_text())
            report = _with_env_steps(run["arms"])
            match_checkpoints(args, report, measure)
            out.write_text(json.dumps({**run, **headline(report), "arms": report}, indent=2))
            summarize(report, args.eval_tasks, out, TITLES[env])
            return
    if args.combine:
        runs = [json.loads(Path(f).read_text()) for f in args.combine]
        report = _with_env_steps([arm for run in runs for arm in run["arms"]])
        Path(args.out).write_text(json.dumps(
            {**headline(report), "combined": args.combine, "commands": [run.get("command") for run in runs],
             "total_minutes": sum(run.get("total_minutes") or 0.0 for run in runs), "arms": report}, indent=2))
        summarize(report, args.eval_tasks, Path(args.out), TITLES[env])
        return

    from agentgym_core.rl.config import load_config

    recipe = load_config(args.recipe)
    args.steps = args.steps or recipe.trainer.steps
    rounds = [int(x) for x in args.rounds.split(",")] if args.rounds else recipe.algorithm.rounds_ctrl.stages
    per_stage = args.stage_steps or max(1, args.steps // len(rounds))
    RESULTS.mkdir(parents=True, exist_ok=True)
    report: list[dict] = []
    started = time.perf_counter()
    load = os.getloadavg()[0]
    earlier = _earlier_sft(args.from_sft, args.eval_tasks) if args.from_sft else None
    for arm in args.arms.split(","):
        # the evaluation after SFT made already (same weights, tasks and horizon), if any
        evaluated = earlier["eval_sft"] if earlier else (report[0]["eval_before"] if report else None)
        if arm == "scaling_inter" and earlier is None:  # the recipe: warm start + staged horizons
            overrides = ["algorithm.rounds_ctrl.type=scaling_inter_stepwise", f"algorithm.rounds_ctrl.rounds={rounds}",
                         f"algorithm.rounds_ctrl.steps_scaling_inter={per_stage}"]
            if args.expert_tasks:
                overrides.append(f"warm_start.expert.n={args.expert_tasks}")
        elif arm in ("scaling_inter", "fixed"):  # an SFT checkpoint's weights (no second warm start)
            if earlier is not None:
                sft_model = earlier["model"]
            else:
                first_arm = f"{args.label}_scaling_inter" if args.label else "scaling_inter"
                sft = sorted((RESULTS / f"learn_{env}" / first_arm / "warm_start" / "checkpoints").glob("step_*"))
                if not sft:
                    raise SystemExit(f"the fixed arm starts from the {first_arm} arm's warm start: run that arm first "
                                     "(--arms scaling_inter,fixed), or give an earlier run's JSON with --from-sft")
                sft_model = sft[-1] / "model"
            overrides = ["warm_start=null", f"model.path={sft_model}"]
            if arm == "fixed":  # the longest horizon throughout
                overrides += ["algorithm.rounds_ctrl.type=fixed", f"algorithm.rounds_ctrl.rounds=[{rounds[-1]}]"]
            else:
                overrides += ["algorithm.rounds_ctrl.type=scaling_inter_stepwise",
                              f"algorithm.rounds_ctrl.rounds={rounds}",
                              f"algorithm.rounds_ctrl.steps_scaling_inter={per_stage}"]
            if evaluated:
                overrides.append("trainer.eval_before=false")
        else:
            raise SystemExit(f"unknown arm {arm!r}: scaling_inter or fixed")
        row = run_arm(f"{args.label}_{arm}" if args.label else arm, args, overrides)
        if row["eval_before"] is None:
            row["eval_before"] = evaluated
        if earlier is not None:
            row["eval_sft"], row["sft_from"] = earlier["eval_sft"], args.from_sft
        report.append(row)
        Path(args.out).write_text(json.dumps(
            {**headline(report), "command": f"python bench/learn_{env}.py " + " ".join(sys.argv[1:]),
             "load_avg_1m_start": load, "total_minutes": (time.perf_counter() - started) / 60, "arms": report},
            indent=2))

    print(f"total {(time.perf_counter() - started) / 60:.1f} min")
    summarize(report, args.eval_tasks, Path(args.out), TITLES[env])


def _earlier_sft(path: str, eval_tasks: int) -> dict:
    """The SFT checkpoint and the evaluation after SFT of the earlier run whose results JSON is ``path``."""
    run = json.loads(Path(path).read_text())
    first = run["arms"][0]
    evaluated = first.get("eval_sft") or first.get("eval_before")
    sft = sorted(_arm_dir(first).glob("warm_start/checkpoints/step_*"))
    if not sft or not evaluated:
        raise SystemExit(f"{path}: its first arm has no SFT checkpoint under {Path(first['config']).parent}/warm_start "
                         "or no evaluation after SFT; run it without --from-sft first")
    if evaluated["tasks"] != eval_tasks:
        raise SystemExit(f"{path} evaluated {evaluated['tasks']} tasks after SFT; pass --eval-tasks {evaluated['tasks']}")
    return {"model": sft[-1] / "model", "eval_sft": evaluated}


def headline(report: list[dict]) -> dict:
    """The top-level figures: the first arm's held-out success after SFT and after RL, paired over tasks."""
    from agentgym_core.evaluation.paired import paired_difference

    first = report[0]
    sft = first.get("eval_sft") or first.get("eval_before")
    after = first.get("eval_after")
    if not (sft and after and sft.get("per_task") and after.get("per_task")):
        return {"n_tasks": None, "sft_success": None, "rl_success": None, "diff_ci95": None}
    paired = paired_difference(sft["per_task"], after["per_task"])
    for row in report:  # every arm against the same SFT evaluation, and the others against the first arm
        if row.get("eval_after") and row["eval_after"].get("per_task"):
            row["paired_vs_sft"] = paired_difference(sft["per_task"], row["eval_after"]["per_task"])
            if row is not first:
                row["paired_vs_first_arm"] = paired_difference(after["per_task"], row["eval_after"]["per_task"])
    return {"n_tasks": paired["n_tasks"], "sft_success": paired["before"], "rl_success": paired["after"],
            "diff": paired["diff"], "diff_ci95": paired["ci95"], "rl_checkpoint": first["rl_checkpoint"],
            "arm": first["arm"]}


def _change_text(paired: dict) -> str:
    return (f"{100 * paired['diff']:+.1f} points, 95% CI [{100 * paired['ci95'][0]:+.1f}, "
            f"{100 * paired['ci95'][1]:+.1f}] (+{paired['gained']} / -{paired['lost']} tasks)")


def _env_steps_text(row: dict, step: int | None) -> str:
    taken = (row.get("env_steps") or {}).get(str(step))
    return "" if taken is None else f", {taken:.0f} environment steps in training"


def summarize(report: list[dict], eval_tasks: int, out: Path, title: str) -> None:
    fmt = lambda e: "   -  " if not e else f"{100 * e['success']:5.1f}%"  # noqa: E731
    first = report[0]
    print(f"\nheld-out success ({eval_tasks} {title} test tasks, greedy):")
    print(f"  base model            {fmt(first.get('eval_base'))}")
    print(f"  after SFT             {fmt(first.get('eval_sft') or first.get('eval_before'))}")
    for row in report:
        paired = row.get("paired_vs_sft")
        change = "" if not paired else f"   change {_change_text(paired)}"
        # minutes of all its RL steps, from the curve: a resumed arm's invocation timed only the steps it ran
        step_minutes = sum(x["time_step"] or 0.0 for x in row["train"]) / 60
        print(f"  after SFT+RL {row['arm']:<9} {fmt(row['eval_after'])}   ({_last_step(row)} steps, "
              f"{step_minutes:.1f} min of steps){change}{_env_steps_text(row, _last_step(row))}")
        if row.get("paired_vs_first_arm"):
            print(f"    vs {first['arm']} ({_last_step(row)} vs {_last_step(first)} RL steps): "
                  f"{_change_text(row['paired_vs_first_arm'])}")
        for measure, (key, _, words) in MATCHES.items():
            matched = row.get(key)
            if matched:
                print(f"    at step {matched['step']} ({matched[measure]:.0f} {words}, {first['arm']} "
                      f"{matched['first_arm_' + measure]:.0f}): {fmt(matched['eval'])}, vs {first['arm']}: "
                      f"{_change_text(matched['paired_vs_first_arm'])}")
    print(f"results in {out}")
    if plot(report, out.with_suffix(".png"), title):
        print(f"curves: {out.with_suffix('.png')}")
    else:
        print("matplotlib not installed (pip install -e .[bench]): no PNG; the curves are in the JSON")


if __name__ == "__main__":
    main()
