"""Does RL make SmolLM2-135M better at BabyAI on this CPU? Before/after success on held-out tasks.

Arms, each from the same base model and the same step budget:

* ``scaling_inter``: GRPO with the horizon growing in stages (ScalingInter-RL);
* ``fixed``: GRPO with the longest horizon from the first step;
* optional ``--sft-episodes N``: a supervised warm start on N expert episodes (the BabyAI expert
  driven through text actions) before RL; then SFT-only and SFT+RL are reported separately.

Every arm is evaluated greedily on the same held-out test tasks before and after. Results go to
bench/results/learn_babyai.json and, when matplotlib is installed, learn_babyai.png (train
success per step for each arm). Budget: ``--minutes`` of wall time split across the arms.

    python bench/learn_babyai.py --minutes 90 --steps 40 --eval-tasks 40
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def sft_warm_start(model, tokenizer, episodes: int, max_turns: int, lr: float, seed: int) -> dict[str, float]:
    """SFT (agentgym_core.finetune) on N expert episodes: collected as trajectories, loss on assistant tokens only."""
    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.config import CollectConfig, FinetuneConfig
    from agentgym_core.finetune.sft import run_sft

    data = RESULTS / "learn_babyai" / "sft_expert.jsonl"
    data.unlink(missing_ok=True)
    collect(CollectConfig(env="babyai", policy="expert", n=episodes, shuffle=True, seed=seed, max_turns=max_turns,
                          out=str(data)), tokenizer=tokenizer, progress=False)
    run_dir = RESULTS / "learn_babyai" / "sft"
    config = FinetuneConfig.model_validate({
        "kind": "sft", "data": {"paths": [str(data)], "only_successful": True, "max_tokens": None},
        "sft": {"epochs": 1, "batch_size": 1}, "optim": {"lr": lr},
        "trainer": {"run_dir": str(run_dir), "seed": seed, "eval_tasks": 0, "progress": False},
    })
    if (run_dir / "metrics.jsonl").exists():
        (run_dir / "metrics.jsonl").unlink()
    result = run_sft(config, model=model, tokenizer=tokenizer, checkpoint=False)
    losses = [json.loads(x)["loss"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"sft_episodes": float(result.steps), "sft_loss_first": losses[0] if losses else 0.0,
            "sft_loss_last": losses[-1] if losses else 0.0}


def run_arm(name: str, args: argparse.Namespace, rounds: list[int], scheduler: str, sft: bool) -> dict:
    from agentgym_core.plugins import get_plugin_manager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.setup import load_policy
    from agentgym_core.rl.trainer import train

    run_dir = RESULTS / "learn_babyai" / name
    config = load_config(args.recipe, [
        f"trainer.run_dir={run_dir}", f"trainer.steps={args.steps}", f"trainer.eval_tasks={args.eval_tasks}",
        f"algorithm.rounds_ctrl.type={scheduler}", f"algorithm.rounds_ctrl.rounds={rounds}",
        f"algorithm.rounds_ctrl.steps_scaling_inter={max(1, args.steps // len(rounds))}",
        f"trainer.seed={args.seed}", "trainer.save_every=1000",
    ])
    model, tokenizer = load_policy(config.model)
    extra = {}
    if sft:
        extra = sft_warm_start(model, tokenizer, args.sft_episodes, args.sft_max_turns, args.sft_lr, args.seed)
    t0 = time.perf_counter()
    results = train(config, plugin_manager=get_plugin_manager(), model=model, tokenizer=tokenizer)
    curve = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"arm": name, "minutes": (time.perf_counter() - t0) / 60, **extra,
            "before": results.get("eval_before", {}).get("success"),
            "after": results.get("eval_after", {}).get("success"),
            "train_success": [x["success"] for x in curve if x["kind"] == "train"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=str(Path(__file__).parents[1] / "examples" / "babyai_grpo_cpu.yaml"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-tasks", type=int, default=40)
    parser.add_argument("--rounds", default="4,8,12", help="ScalingInter stages; fixed uses the last")
    parser.add_argument("--sft-episodes", type=int, default=0)
    parser.add_argument("--sft-lr", type=float, default=1e-5)
    parser.add_argument("--sft-max-turns", type=int, default=64, help="longest expert episode kept for SFT")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rounds = [int(x) for x in args.rounds.split(",")]
    RESULTS.mkdir(parents=True, exist_ok=True)
    arms = [("scaling_inter", rounds, "scaling_inter_stepwise", False), ("fixed", [rounds[-1]], "fixed", False)]
    if args.sft_episodes:
        arms.append(("sft_scaling_inter", rounds, "scaling_inter_stepwise", True))
    report = [run_arm(name, args, r, s, sft) for name, r, s, sft in arms]
    for row in report:
        print(f"{row['arm']:20s} before {row['before']}  after {row['after']}  ({row['minutes']:.1f} min)")
    (RESULTS / "learn_babyai.json").write_text(json.dumps(report, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        for row in report:
            plt.plot(row["train_success"], label=row["arm"])
        plt.xlabel("step")
        plt.ylabel("train success")
        plt.legend()
        plt.savefig(RESULTS / "learn_babyai.png", dpi=120)
    except ImportError:
        print("matplotlib not installed: no PNG (the curves are in learn_babyai.json)")


if __name__ == "__main__":
    main()
