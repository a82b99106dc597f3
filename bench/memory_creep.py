"""Does the memory left after each training step grow, and with what?

The main job's SFT and RL updates take one optimizer step after several forward-and-backward
micro-batches, and the resident memory left between steps (the floor the next step starts from) had
grown by about 0.07 GB a step. This script runs such steps on SmolLM2-135M (8 micro-batches of random
tokens a step, bf16 autocast, AdamW with its moments on disk as in the main job, the C heap trimmed
after each step) and prints, after every step, the RSS and what glibc's heap holds in use
(``mallinfo2``), three ways, each a fresh process:

* ``varied, oneDNN's cache capped``: micro-batches of 430-999 tokens (as episodes are), with
  ``ONEDNN_PRIMITIVE_CACHE_CAPACITY=32`` and PyTorch's own primitive cache at its default
  (``LRU_CACHE_CAPACITY=1024``): the main job's setting before 2026-12-07;
* ``varied, both capped``: the same lengths with ``runtime.onednn_primitive_cache: 32`` as it is now
  (both caches at 32);
* ``fixed, oneDNN's cache capped``: every micro-batch 800 tokens, the caches as in the first.

    python bench/memory_creep.py [--steps 5] [--out bench/results/memory_creep.json]

Linux with glibc only (it reads /proc and glibc's counters). Bytes, not time: the figures do not
depend on the machine's load.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

SETTINGS = {  # name -> (micro-batch lengths, environment)
    "varied, oneDNN's cache capped": ("varied", {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32", "LRU_CACHE_CAPACITY": "1024"}),
    "varied, both capped": ("varied", {}),
    "fixed, oneDNN's cache capped": ("fixed", {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32", "LRU_CACHE_CAPACITY": "1024"}),
}


def _rss_gb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def _heap_in_use_gb() -> float:
    from heap_probe import MallInfo2  # bench/ is on sys.path: this script's folder

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    return libc.mallinfo2().uordblks / 1e9


def measure(lengths: str, steps: int) -> dict:
    """The steps in this process: the RSS and heap in use after each."""
    import torch

    from agentgym_core.rl.config import ModelConfig, OptimConfig, RuntimeConfig
    from agentgym_core.rl.forward import forward_tokens, mixed_precision
    from agentgym_core.rl.policy import load_policy
    from agentgym_core.training.memory import release_memory
    from agentgym_core.training.optimizer import build_optimizer
    from agentgym_core.training.optimizer_on_disk import OptimizerStateOnDisk

    model, _ = load_policy(ModelConfig(path="smollm2-135m-instruct", gradient_checkpointing=True,
                                       gradient_checkpointing_above_tokens=1024, mixed_precision="auto"),
                           runtime=RuntimeConfig(threads=2, onednn_primitive_cache=32))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer, _ = build_optimizer(params, [], OptimConfig(lr=5e-5), steps)
    rng = random.Random(0)
    rows = []
    with tempfile.TemporaryDirectory(dir=RESULTS.parent) as scratch:  # on disk, not a memory-backed /tmp
        on_disk = OptimizerStateOnDisk(optimizer, Path(scratch) / "optimizer_state.pt").around_steps()
        release_memory()
        loaded = _rss_gb()
        for step in range(steps):
            model.train()
            with mixed_precision("auto", model, cache=False):
                for _ in range(8):
                    n = 800 if lengths == "fixed" else rng.randrange(430, 1000)
                    ids = [rng.randrange(100, 40000) for _ in range(n)]
                    mask = torch.ones(1, n)
                    mask[0, 0] = 0
                    stats = forward_tokens(model, [ids], mask, max_tokens=1024)
                    (-(stats.logprobs * mask).sum() / (8 * n)).backward()
                    del stats
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            model.eval()
            on_disk.wait_for_write()
            release_memory()
            rows.append({"rss_gb": _rss_gb(), "heap_in_use_gb": _heap_in_use_gb()})
            print(f"  step {step + 1}: RSS {rows[-1]['rss_gb']:.3f} GB, heap in use {rows[-1]['heap_in_use_gb']:.3f} GB",
                  flush=True)
        on_disk.close()
    return {"loaded_rss_gb": loaded, "steps": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default=str(RESULTS / "memory_creep.json"))
    parser.add_argument("--one-setting", nargs=2, metavar=("LENGTHS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_setting:
        lengths, out = args.one_setting
        Path(out).write_text(json.dumps(measure(lengths, args.steps)))
        return

    sys.path.insert(0, str(Path(__file__).parent))
    from common import write_json

    base = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (lengths, env) in SETTINGS.items():
            print(f"{name}:", flush=True)
            out = Path(tmp) / "run.json"
            subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--one-setting", lengths, str(out)],
                           env=base | env, check=True)
            runs[name] = {"lengths": lengths, "environment": env, **json.loads(out.read_text())}
    for name, run in runs.items():
        first, last = run["steps"][0], run["steps"][-1]
        print(f"{name}: RSS after step 1 {first['rss_gb']:.2f} GB, after step {len(run['steps'])} "
              f"{last['rss_gb']:.2f} GB; heap in use {first['heap_in_use_gb']:.2f} -> {last['heap_in_use_gb']:.2f} GB")
    print(f"wrote {write_json(args.out, {'steps': args.steps, 'runs': runs})}")


if __name__ == "__main__":
    main()
