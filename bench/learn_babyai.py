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

import torch

RESULTS = Path(__file__).parent / "results"


def sft_warm_start(model, tokenizer, episodes: int, max_turns: int, lr: float, seed: int) -> dict[str, float]:
    """Cross-entropy on the expert's replies (``Thought: ... Action: <expert action>``), assistant tokens only."""
    from agentgym_env_babyai.env import BabyAIEnv
    from agentgym_env_babyai.expert import solve

    env = BabyAIEnv()
    train_ids = BabyAIEnv.tasks().split("train")
    g = torch.Generator().manual_seed(seed)
    picks = [train_ids[i] for i in torch.randperm(len(train_ids), generator=g)[:episodes].tolist()]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses = []
    for task in picks:
        result = solve(env, task, max_turns=max_turns)
        if not result.success:
            continue
        messages = [{"role": "system", "content": env.instruction}, {"role": "user", "content": env.reset(task).observation}]
        for action in result.actions:
            reply = f"Thought: I will {action}.\nAction: {action}"
            messages = messages + [{"role": "assistant", "content": reply},
                                   {"role": "user", "content": env.step(action).observation}]
        # One example per episode: the full conversation, loss on every assistant turn.
        full = tokenizer.apply_chat_template(messages[:-1], tokenize=False)
        ids = tokenizer.encode(full, add_special_tokens=False)
        labels = list(ids)
        prefix = 0
        for k in range(2, len(messages) - 1, 2):
            head = tokenizer.encode(tokenizer.apply_chat_template(messages[:k], tokenize=False, add_generation_prompt=True),
                                    add_special_tokens=False)
            body = tokenizer.encode(tokenizer.apply_chat_template(messages[: k + 1], tokenize=False), add_special_tokens=False)
            labels[prefix: len(head)] = [-100] * (len(head) - prefix)
            prefix = len(body)
        out = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(out.loss.detach()))
    model.eval()
    env.close()
    return {"sft_episodes": float(len(losses)), "sft_loss_first": losses[0] if losses else 0.0,
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
