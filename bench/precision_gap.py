"""How far a bf16-autocast learner's log-probs are from the sampler's, on the tokens a run sampled.

A training run records, for every sampled token, the log-prob the rollout backend drew it with (float32
weights on CPU). The learner recomputes those log-probs in its own precision (``model.mixed_precision``:
bf16 autocast on a CPU with native bf16) and the run reports the gap as ``sampler_kl``. This script
recomputes one step's trajectories with the checkpoint that sampled them, in float32 and under bf16
autocast, and splits the gap by where the token sits in its reply:

* ``thought``: tokens before the action marker (``Action:``), free text;
* ``action``: the marker's continuation up to the end of the reply, which ``rollout.constrain_actions``
  restricts to the listed actions (so the sampled token can be far down the model's distribution).

Per precision and part: tokens, mean of sampler minus learner log-prob (the k1 estimate of the KL from
sampler to learner), the 99th percentile and maximum of the absolute gap, and the share of tokens whose
ratio pi_learner / pi_sampler is past the off-policy cap (2 by default, ``algorithm.off_policy.cap``).
Writes ``bench/results/precision_gap_<name>.json``.

    python bench/precision_gap.py RUN_DIR --step 7 --checkpoint RUN_DIR/checkpoints/step_000006/model
    python bench/precision_gap.py RUN_DIR --step 7 --checkpoint RUN_DIR/warm_start/checkpoints/step_000020/model

The checkpoint must be the one whose weights sampled the step (a trajectory's ``policy_version``); another
checkpoint measures the float32-vs-bf16 gap of that model on the same tokens, with the sampler column then
comparing two different models.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentgym_core.rollout.action_choices import ACTION_MARKER

RESULTS = Path(__file__).parent / "results"


def cpu_name() -> str:
    """The CPU's model name (Linux), else the architecture, with the CPU count."""
    try:
        name = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.machine()
    return f"{name}, {os.cpu_count()} CPUs"


def reply_parts(token_ids: list[int], start: int, end: int, decode) -> list[str]:
    """``"thought"`` or ``"action"`` for each token of the reply ``token_ids[start:end]``: action once the
    text before the token ends with the marker (with or without its space)."""
    parts, marked = [], False
    for i in range(start, end):
        if not marked:
            text = decode(token_ids[start:i])
            marked = text.rstrip(" ").endswith(ACTION_MARKER)
        parts.append("action" if marked else "thought")
    return parts


def token_logprobs(model, ids: list[int], *, bf16: bool) -> torch.Tensor:
    """(T-1,) log-prob of each token after the first given the ones before it, float32 or under bf16 autocast."""
    x = torch.tensor([ids])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x).logits[0, :-1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, x[0, 1:, None])[:, 0]


def summarize(gaps: list[float], cap: float) -> dict:
    """Sampler minus learner log-probs -> the figures above."""
    if not gaps:
        return {"tokens": 0}
    absolute = sorted(abs(g) for g in gaps)
    return {
        "tokens": len(gaps),
        "k1_sampler_to_learner": statistics.fmean(gaps),
        "abs_gap_p99": absolute[min(len(absolute) - 1, int(0.99 * len(absolute)))],
        "abs_gap_max": absolute[-1],
        # ratio pi_learner / pi_sampler = exp(-gap): past the cap either way (above cap or below 1/cap)
        "share_past_cap": sum(abs(g) > math.log(cap) for g in gaps) / len(gaps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="a training run's directory (trajectories/ saved)")
    ap.add_argument("--step", type=int, required=True, help="the step whose trajectories to read")
    ap.add_argument("--checkpoint", type=Path, required=True, help="a saved model directory (checkpoints/.../model)")
    ap.add_argument("--episodes", type=int, default=30, help="distinct episodes to read (default 30)")
    ap.add_argument("--cap", type=float, default=2.0, help="the off-policy cap on the ratio (default 2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", default=None, help="results file suffix (default: the run directory's parent's name)")
    args = ap.parse_args()

    path = args.run_dir / "trajectories" / f"step_{args.step:06d}.jsonl"
    if not path.is_file():
        ap.error(f"{path} not found: the run must save trajectories (trainer.save_trajectories) for step {args.step}")
    if not (args.checkpoint / "config.json").is_file():
        ap.error(f"{args.checkpoint} holds no model (config.json); pass a checkpoint's model/ directory")
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32).eval()

    gaps = {(p, part): [] for p in ("float32", "bf16_autocast") for part in ("thought", "action")}
    versions, seen = set(), set()
    with path.open() as lines:
        for line in lines:
            episode = json.loads(line)
            ids = episode["token_ids"]
            if tuple(ids) in seen:  # a group's tied episodes repeat the same tokens
                continue
            seen.add(tuple(ids))
            versions.add(episode.get("policy_version"))
            part_of: dict[int, str] = {}
            for turn in episode["turns"]:
                span = turn["action_span"]
                for i, part in enumerate(reply_parts(ids, span["start"], span["end"], tokenizer.decode)):
                    part_of[span["start"] + i] = part
            for precision in ("float32", "bf16_autocast"):
                learner = token_logprobs(model, ids, bf16=precision == "bf16_autocast").tolist()
                for i, part in part_of.items():
                    if i > 0 and episode["loss_mask"][i]:
                        gaps[precision, part].append(episode["logprobs"][i] - learner[i - 1])
            if len(seen) >= args.episodes:
                break

    result = {
        "run_dir": str(args.run_dir), "step": args.step, "checkpoint": str(args.checkpoint),
        "policy_versions": sorted(v for v in versions if v is not None), "episodes": len(seen), "cap": args.cap,
        "machine": cpu_name(), "torch": torch.__version__,
        "gap": {precision: {part: summarize(gaps[precision, part], args.cap) for part in ("thought", "action")}
                for precision in ("float32", "bf16_autocast")},
    }
    for precision, parts in result["gap"].items():
        for part, s in parts.items():
            if s["tokens"]:
                print(f"{precision:14s} {part:8s} tokens {s['tokens']:5d}  k1 {s['k1_sampler_to_learner']:+.4f}  "
                      f"|gap| p99 {s['abs_gap_p99']:.3f} max {s['abs_gap_max']:.3f}  "
                      f"past cap {100 * s['share_past_cap']:.2f}%")
    name = args.name or args.run_dir.resolve().parent.name
    out = RESULTS / f"precision_gap_{name}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
