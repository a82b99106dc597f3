"""Peak memory of one rollout phase, by how the transformers backend reads prompts joining together.

The one-GPU recipe's rollouts (``examples/babyai_grpo_1p5b_gpu.yaml``: 8 tasks x 4 samples here,
6 turns of 96 tokens, contexts reaching ~2,800 tokens) on a small model of Qwen2's architecture
(4 layers, hidden 256, 4 query / 2 KV heads; random weights, the embedded default's tokenizer) on
the CPU, one RL step per setting through ``python -m agentgym_core train``, each in its own process.
A random policy writes to the token cap every turn, so every setting samples the same lengths.
Compared (``--modes``, each a ``rollout.backend_options`` mapping):

* ``{prefill: batched, prefill_chunk_tokens: 1000000}``: every row joining at a step in one padded pass
  (the GPU default before the bound);
* ``{prefill: batched}``: padded passes of at most 16,384 columns (the default bound);
* ``{prefill: per_row}``: one pass per row (the CPU default).

    python bench/rollout_memory.py [--out bench/results/rollout_memory.json]

Prints each setting's peak resident memory in the rollout and its rollout time; writes the JSON.
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
MODES = ["{prefill: batched, prefill_chunk_tokens: 1000000}", "{prefill: batched}", "{prefill: per_row}"]
SHAPE = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, tie_word_embeddings=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", nargs="+", default=MODES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rollout_memory.json")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rollout_memory_"))
    save_random_qwen2(work / "model", SHAPE)
    rows = []
    for k, mode in enumerate(args.modes):
        run_dir = work / f"run_{k}"
        command = [sys.executable, "-m", "agentgym_core", "train", str(RECIPE), f"model.path={work / 'model'}",
                   "model.device=cpu", f"runtime.threads={args.threads}", "rollout.backend=transformers",
                   f"rollout.backend_options={mode}", "trainer.steps=1", "trainer.eval_tasks=0",
                   f"trainer.run_dir={run_dir}", "rollout.tasks_per_step=8", "rollout.max_new_tokens=96",
                   "trainer.progress=false", "trainer.tensorboard=false", "trainer.save_trajectories=false"]
        t0 = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
        step = next(x for x in lines if x.get("kind") == "train")
        row = {"backend_options": mode, "seconds": time.perf_counter() - t0,
               **{key: step[key] for key in ("peak_rss_rollout_gb", "time_rollout", "sampled_tokens", "update_tokens")}}
        rows.append(row)
        print(f"{mode:55s} rollout peak {row['peak_rss_rollout_gb']:.2f} GB, {row['time_rollout']:.1f} s, "
              f"{row['sampled_tokens']:.0f} sampled tokens", flush=True)
    summary = {"model": SHAPE, "recipe": str(RECIPE.relative_to(ROOT)), "threads": args.threads,
               "load_avg_1m": os.getloadavg()[0], "settings": rows}
    base = rows[0]["peak_rss_rollout_gb"]
    summary["peak_over_first"] = {r["backend_options"]: r["peak_rss_rollout_gb"] / base for r in rows}
    print(f"wrote {write_json(args.out, summary)}")


if __name__ == "__main__":
    main()
