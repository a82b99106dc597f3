"""Loading the default model: its GGUF file parsed by transformers, against the converted copy in agentgym's cache.

Every round, in fresh processes as a user's runs are: ``load_pretrained`` with the cache off (the GGUF file
parsed, as before the cache existed), then with an empty cache folder (parsed, then saved: a machine's
first load), then with that folder filled (the copy read: every later load). Rounds alternate the modes,
so a busy machine slows them alike. Prints a table and writes bench/results/model_load.json: seconds and
CPU seconds of the load (imports excluded), medians over rounds, and the ratios against the cache off.

    python bench/model_load.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import write_json

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, os, resource, sys, time
import torch, transformers
from agentgym_core.models import load_pretrained
torch.set_num_threads(int(sys.argv[2]))
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t, c = time.perf_counter(), cpu()
model, tokenizer = load_pretrained(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t, "cpu_seconds": cpu() - c,
                  "parameters": sum(p.numel() for p in model.parameters())}))
"""
MODES = ("cache off", "first load (saves the copy)", "cached copy")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_once(model: str, cache: str, threads: int) -> dict:
    env = {**os.environ, "AGENTGYM_CACHE_DIR": cache}
    done = subprocess.run([sys.executable, "-c", CHILD, model, str(threads)], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"loading {model} failed (AGENTGYM_CACHE_DIR={cache!r}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a named model or a .gguf file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "model_load.json"))
    args = parser.parse_args()

    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for round_ in range(args.rounds):
        cache = tempfile.mkdtemp(prefix="agentgym-bench-cache-")
        try:
            runs["cache off"].append(load_once(args.model, "", args.threads))
            runs["first load (saves the copy)"].append(load_once(args.model, cache, args.threads))
            runs["cached copy"].append(load_once(args.model, cache, args.threads))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        print(f"round {round_ + 1}/{args.rounds}: " + ", ".join(
            f"{mode} {runs[mode][-1]['seconds']:.1f} s" for mode in MODES), flush=True)

    rows = {mode: {"seconds_median": round(statistics.median(r["seconds"] for r in rs), 2),
                   "cpu_seconds_median": round(statistics.median(r["cpu_seconds"] for r in rs), 2),
                   "seconds": [round(r["seconds"], 2) for r in rs]} for mode, rs in runs.items()}
    off = rows["cache off"]["seconds_median"]
    for row in rows.values():
        row["x_faster_than_cache_off"] = round(off / row["seconds_median"], 2)
    import transformers

    result = {"model": args.model, "parameters": runs["cache off"][0]["parameters"], "rounds": args.rounds,
              "threads": args.threads, "machine": f"{_cpu_name()}, {os.cpu_count()} cores",
              "transformers": transformers.__version__, "modes": rows}
    print(f"\n{'load of ' + args.model:<32}{'seconds':>9}{'CPU s':>8}{'vs cache off':>14}")
    for mode, row in rows.items():
        print(f"{mode:<32}{row['seconds_median']:>9.1f}{row['cpu_seconds_median']:>8.1f}"
              f"{row['x_faster_than_cache_off']:>13.2f}x")
    print(f"wrote {write_json(args.out, result)}")


if __name__ == "__main__":
    main()
