"""The main job's SFT and RL checkpoints sampled K times per panel task: does RL raise sampled success?

The main job's own table is greedy: one episode per test task, so each task is a 0/1 that any small change
of the weights can flip, and a run's interval mixes what RL did with which marginal tasks flipped. RL
itself optimizes success when replies are *sampled* (temperature 1.0 in the recipe). This script plays
each checkpoint on the run's own panel (``agentgym eval --from RUN --model CHECKPOINT``: its 50 test
tasks, horizon, token budget and action constraint) K times a task at the training temperature, and
pairs the per-task success rates (Avg@K) of SFT and RL: a paired t interval over tasks (as the trainer's)
and a percentile bootstrap over tasks beside it. Both checkpoints are sampled with the same seed. Per level
(the tasks' category) it also keeps each checkpoint's success rate and how its episodes opened (the first word
of the first action), and prints both pooled over the runs: where RL gains, where it loses, and what it learnt.

    python bench/main_job_sampled.py --run seed0=runs/babyai_grpo_cpu --machine "2-core Intel Xeon" \\
        --out bench/results/main_job_sampled.json

``--run NAME=RUN_DIR`` repeats: one row per run. A run's SFT checkpoint is its warm start's newest (or
the ``model.path`` it started RL from); its RL checkpoint is its newest. Evaluations go to ``--work``
(one folder per checkpoint and sampling setting; a finished one is reused, an interrupted one resumed),
so runs that share an SFT checkpoint play it once. About 8 minutes an evaluation of 200 episodes on
this project's 2-core CPU.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from common import write_json

from agentgym_core.evaluation.paired import paired_difference


def checkpoint_model(checkpoints: Path) -> Path | None:
    """The model folder of the newest checkpoint under ``checkpoints`` (its ``latest`` file names it)."""
    latest = checkpoints / "latest"
    if not latest.is_file():
        return None
    model = checkpoints / latest.read_text(encoding="utf-8").strip() / "model"
    return model if model.is_dir() else None


def run_checkpoints(run: Path) -> tuple[Path, Path]:
    """(SFT checkpoint, RL checkpoint) of a finished main-job run directory."""
    rl = checkpoint_model(run / "checkpoints")
    if rl is None:
        raise SystemExit(f"{run}: no RL checkpoint (checkpoints/latest); is it a finished `agentgym train` run?")
    sft = checkpoint_model(run / "warm_start" / "checkpoints")
    if sft is None:  # RL started from a given model (warm_start=null model.path=...)
        import yaml
        path = (yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")).get("model") or {}).get("path")
        if not path or not Path(path).is_dir():
            raise SystemExit(f"{run}: no warm start and its model.path {path!r} is not a folder: no SFT checkpoint")
        sft = Path(path)
    return sft.resolve(), rl.resolve()


def evaluate(run: Path, model: Path, *, work: Path, samples: int, temperature: float, seed: int,
             threads: int) -> tuple[dict, Path]:
    """``agentgym eval`` of ``model`` on ``run``'s panel, K samples a task; its results.json and its folder
    (the episodes are in its trajectories.jsonl)."""
    key = hashlib.sha1(str(model).encode()).hexdigest()[:10]
    out = work / f"{key}_k{samples}_t{temperature:g}_s{seed}"
    if (out / "eval_config.json").is_file():
        played = json.loads((out / "eval_config.json").read_text(encoding="utf-8"))["model"]
        if played != str(model):
            raise SystemExit(f"{out} holds an evaluation of {played}, not {model}: give another --work")
    if (out / "results.json").is_file():
        return json.loads((out / "results.json").read_text(encoding="utf-8")), out
    cli = shutil.which("agentgym", path=str(Path(sys.executable).parent)) or "agentgym"
    command = [cli, "eval", "--from", str(run), "--model", str(model), "--n-samples", str(samples),
               "--temperature", str(temperature), "--seed", str(seed), "--threads", str(threads), "--out", str(out)]
    if (out / "eval_config.json").is_file():
        command.append("--resume")
    print(f"evaluating {model} ({samples} samples a task at temperature {temperature:g}) -> {out}", flush=True)
    subprocess.run(command, check=True)
    return json.loads((out / "results.json").read_text(encoding="utf-8")), out


def samples_per_task(results: dict) -> dict[str, list[int]]:
    """``env:task`` -> its samples' successes (0/1), in sample order."""
    rows: dict[str, list[tuple[int, int]]] = {}
    for row in results["per_task"]:
        rows.setdefault(f"{row['env']}:{row['task_id']}", []).append((row["sample_index"], int(bool(row["success"]))))
    return {task: [s for _, s in sorted(r)] for task, r in sorted(rows.items())}


def levels(results: dict) -> dict[str, str]:
    """``env:task`` -> its category (BabyAI: the level)."""
    return {f"{row['env']}:{row['task_id']}": row["category"] or "-" for row in results["per_task"]}


def level_rates(samples: dict[str, list[int]], level_of: dict[str, str]) -> dict[str, float]:
    """Success rate per category over all its tasks' samples."""
    pooled: dict[str, list[int]] = {}
    for task, outcomes in samples.items():
        pooled.setdefault(level_of[task], []).extend(outcomes)
    return {level: sum(o) / len(o) for level, o in sorted(pooled.items())}


def first_moves(folder: Path) -> dict[str, dict[str, int]]:
    """Per category, how many episodes opened with each kind of action (the first word of the first turn's
    parsed action, e.g. BabyAI's ``go``, ``pickup``, ``turn``; ``-`` where the first reply had none)."""
    counts: dict[str, dict[str, int]] = {}
    for line in (folder / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        episode = json.loads(line)
        action = (episode["turns"][0].get("action") or "") if episode.get("turns") else ""
        verb = action.split()[0] if action.split() else "-"
        level = counts.setdefault(episode.get("category") or "-", {})
        level[verb] = level.get(verb, 0) + 1
    return {level: dict(sorted(c.items())) for level, c in sorted(counts.items())}


def rates(samples: dict[str, list[int]]) -> dict[str, float]:
    return {task: sum(s) / len(s) for task, s in samples.items()}


def bootstrap_ci95(before: dict[str, float], after: dict[str, float], *, resamples: int = 10_000,
                   seed: int = 0) -> list[float]:
    """Percentile bootstrap over tasks of the mean per-task change (2.5th and 97.5th percentiles)."""
    d = [after[t] - before[t] for t in sorted(set(before) & set(after))]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(d, k=len(d))) / len(d) for _ in range(resamples))
    return [means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]]


def compare(name: str, run: Path, args: argparse.Namespace) -> dict:
    sft, rl = run_checkpoints(run)
    options = dict(work=args.work, samples=args.samples, temperature=args.temperature, seed=args.seed,
                   threads=args.threads)
    sft_results, sft_folder = evaluate(run, sft, **options)
    rl_results, rl_folder = evaluate(run, rl, **options)
    sft_samples, rl_samples = samples_per_task(sft_results), samples_per_task(rl_results)
    level_of = levels(sft_results)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8")) if (run / "summary.json").is_file() else {}
    # the run's own table is the greedy comparison only where the trainer played one greedy episode a task
    greedy = summary.get("paired") if summary.get("samples_per_task", 1) == 1 and not summary.get("temperature") else None
    row = {"run_dir": str(run), "sft_checkpoint": str(sft), "rl_checkpoint": str(rl),
           "panel_hash": sft_results["panel_hash"],
           "sft_samples": sft_samples, "rl_samples": rl_samples,
           "paired": paired_difference(rates(sft_samples), rates(rl_samples)),
           "bootstrap_ci95": bootstrap_ci95(rates(sft_samples), rates(rl_samples)),
           "invalid_action_rate": {"sft": sft_results["overall"]["invalid_action_rate"],
                                   "rl": rl_results["overall"]["invalid_action_rate"]},
           # the wall time of each evaluation's last invocation (a resumed one: only what it played then)
           "eval_minutes": {"sft": sft_results["timing"]["wall_seconds"] / 60,
                            "rl": rl_results["timing"]["wall_seconds"] / 60},
           "levels": level_of,
           "level_rates": {"sft": level_rates(sft_samples, level_of), "rl": level_rates(rl_samples, level_of)},
           "first_moves": {"sft": first_moves(sft_folder), "rl": first_moves(rl_folder)},
           "greedy_paired": greedy,
           "trainer_after": trainer_after(run, rl_results)}
    if rl_results["panel_hash"] != row["panel_hash"]:
        raise SystemExit(f"{name}: the SFT and RL evaluations played different panels")
    return row


def trainer_after(run: Path, rl_results: dict) -> dict | None:
    """The trainer's own evaluation after RL where it played this panel as this script does (the same panel
    hash: ``trainer.eval_samples`` = K at the same temperature and seed): its success, and the tasks whose rate
    differs from that of ``agentgym eval`` on the saved checkpoint (one evaluator, up to float rounding)."""
    log = run / "metrics.jsonl"
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()] if log.is_file() else []
    same = [r for r in rows if r.get("kind") == "eval" and r.get("panel_hash") == rl_results["panel_hash"]]
    if not same:
        return None
    own, again = same[-1]["per_task"], rates(samples_per_task(rl_results))
    return {"step": same[-1]["step"], "success": same[-1]["success"], "eval_success": rl_results["overall"]["success_avg"],
            "tasks_differing": {task: [own[task], again[task]] for task in sorted(own) if own[task] != again.get(task)}}


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True, metavar="NAME=RUN_DIR",
                        help="a finished main-job run directory, named; repeatable")
    parser.add_argument("--samples", type=int, default=4, help="K: episodes per panel task (default 4)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature (default 1.0, the recipe's training temperature)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed, the same for every checkpoint")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads per evaluation")
    parser.add_argument("--work", type=Path, default=Path("runs/sampled_eval"),
                        help="where the evaluations go (reused and resumed; default runs/sampled_eval)")
    parser.add_argument("--machine", required=True, help="the machine, in words, for the record")
    parser.add_argument("--out", type=Path, required=True, help="the JSON to write")
    args = parser.parse_args()
    if args.samples < 1 or args.temperature <= 0:
        parser.error("--samples must be >= 1 and --temperature > 0 (a greedy panel is the run's own table)")
    runs = {}
    for spec in args.run:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path).is_dir():
            parser.error(f"--run {spec!r}: expected NAME=RUN_DIR with an existing run directory")
        runs[name] = compare(name, Path(path), args)
    diffs = [r["paired"]["diff"] for r in runs.values()]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    record = {"what": "the main job's SFT and RL checkpoints, each panel task sampled K times (Avg@K), paired over tasks",
              "command": "python bench/main_job_sampled.py " + " ".join(sys.argv[1:]),
              "commit": commit, "date": datetime.date.today().isoformat(), "machine": args.machine,
              "samples": args.samples, "temperature": args.temperature, "seed": args.seed,
              "interval": "paired t interval over tasks; bootstrap_ci95: percentile bootstrap over tasks, 10,000 resamples",
              "runs": runs,
              "change": {"mean": statistics.fmean(diffs), "sd": statistics.stdev(diffs) if len(diffs) > 1 else 0.0}}
    write_json(args.out, record)
    print(f"{'run':<12} {'greedy (1 a task)':<34} Avg@{args.samples} at temperature {args.temperature:g}")
    for name, r in runs.items():
        g, p = r["greedy_paired"], r["paired"]
        greedy = (f"{_pts(g['before'])[1:]}% -> {_pts(g['after'])[1:]}%, {_pts(g['diff'])} "
                  f"[{_pts(g['ci95'][0])}, {_pts(g['ci95'][1])}]") if g else "-"
        print(f"{name:<12} {greedy:<34} {100 * p['before']:.1f}% -> {100 * p['after']:.1f}%, {_pts(p['diff'])} "
              f"[{_pts(p['ci95'][0])}, {_pts(p['ci95'][1])}] (bootstrap [{_pts(r['bootstrap_ci95'][0])}, "
              f"{_pts(r['bootstrap_ci95'][1])}]; {p['gained']} tasks up, {p['lost']} down)")
        if r["trainer_after"]:
            t = r["trainer_after"]
            print(f"{'':<12} the trainer's own Avg@{args.samples} after RL: {100 * t['success']:.1f}% "
                  f"({len(t['tasks_differing'])} tasks' rates differ from agentgym eval's)")
    print_levels(runs)
    print(f"wrote {args.out}")


def print_levels(runs: dict[str, dict]) -> None:
    """Per category, over all runs: success after SFT and after RL, and the most common opening action of each."""
    print(f"\nper level, all runs pooled: {'level':<24} {'SFT':>6} {'RL':>6}  opening move after SFT -> after RL")
    for level in sorted({lv for r in runs.values() for lv in r["levels"].values()}):
        cells = []
        for end in ("sft", "rl"):
            tasks = [(r[f"{end}_samples"][t]) for r in runs.values() for t, lv in r["levels"].items() if lv == level]
            outcomes = [o for s in tasks for o in s]
            moves: dict[str, int] = {}
            for r in runs.values():
                for verb, n in r["first_moves"][end].get(level, {}).items():
                    moves[verb] = moves.get(verb, 0) + n
            top = max(moves, key=moves.get) if moves else "-"
            cells.append((sum(outcomes) / len(outcomes), f"{top} {100 * moves.get(top, 0) / max(1, sum(moves.values())):.0f}%"))
        print(f"{'':<26} {level:<24} {100 * cells[0][0]:>5.0f}% {100 * cells[1][0]:>5.0f}%  {cells[0][1]} -> {cells[1][1]}")


if __name__ == "__main__":
    main()
