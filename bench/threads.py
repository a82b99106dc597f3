"""Generation speed at torch's default thread count vs one thread, with and without a competing job.

On a small machine a rollout rarely has the CPU to itself (an env server, a second run, a build).
torch's default is one intra-op thread per core; when another CPU-bound process holds a core, those
threads wait on each other at every operator. This script measures what that costs: SmolLM2-135M
(the backend agentgym uses) greedily generates ``--new-tokens`` tokens for ``--rows`` prompts, at
each thread count, first on an otherwise idle process set, then with ``--jobs`` busy-loop processes
running beside it. Settings alternate, best of ``--repeats`` is kept. Writes
bench/results/threads.json.

    python bench/threads.py                       # SmolLM2-135M, default threads vs 1, 1 competing job
    python bench/threads.py --model tiny --repeats 1   # smoke run

The machine's own load (other users) is not controlled; ``load_avg_1m`` is recorded with each figure.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import torch
from common import load_backend, write_json

from agentgym_core.rollout import SamplingParams


def spin(stop: multiprocessing.synchronize.Event) -> None:
    """A CPU-bound job: pure Python arithmetic until told to stop."""
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x = (x + i * i) % 1_000_003


def tokens_per_second(backend, prompts: list[list[int]], new_tokens: int) -> float:
    """Sampled tokens per second of one greedy generate call over all rows."""
    params = SamplingParams(temperature=0, max_new_tokens=new_tokens)
    start = time.perf_counter()
    samples = backend.generate(prompts, params)
    seconds = time.perf_counter() - start
    return sum(len(s.token_ids) for s in samples) / seconds


def measure(backend, prompts, new_tokens: int, settings: dict[str, int], repeats: int) -> dict[str, dict]:
    """Best tokens/s per thread setting, alternating settings in each repeat."""
    best = {name: 0.0 for name in settings}
    for _ in range(repeats):
        for name, threads in settings.items():
            torch.set_num_threads(threads)
            best[name] = max(best[name], tokens_per_second(backend, prompts, new_tokens))
            print(f"  threads={threads:<2} ({name}): {best[name]:7.1f} tokens/s (best so far)", flush=True)
    return {name: {"threads": settings[name], "tokens_per_s": round(best[name], 2),
                   "load_avg_1m": round(os.getloadavg()[0], 2)} for name in settings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model spec, or 'tiny' (random tiny Llama)")
    parser.add_argument("--rows", type=int, default=4, help="prompts generated together")
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--jobs", type=int, default=1, help="competing busy-loop processes in the loaded phase")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="bench/results/threads.json")
    args = parser.parse_args()

    default_threads = torch.get_num_threads()  # before anything sets it: what a user gets
    backend = load_backend(args.model, threads=None, device="cpu")
    vocab = backend.model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (args.prompt_tokens,), generator=generator).tolist() for _ in range(args.rows)]
    settings = {"default": default_threads, "one": 1}
    tokens_per_second(backend, prompts[:1], 4)  # warm-up: first-call allocations are not the setting's cost

    print(f"idle (torch default = {default_threads} threads, {os.cpu_count()} CPUs):", flush=True)
    idle = measure(backend, prompts, args.new_tokens, settings, args.repeats)

    print(f"with {args.jobs} competing CPU-bound job(s):", flush=True)
    stop = multiprocessing.Event()
    jobs = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(args.jobs)]
    for job in jobs:
        job.start()
    try:
        time.sleep(1.0)  # let the jobs reach full speed
        loaded = measure(backend, prompts, args.new_tokens, settings, args.repeats)
    finally:
        stop.set()
        for job in jobs:
            job.join(timeout=10)

    result = {
        "model": args.model, "cpu_count": os.cpu_count(), "torch_default_threads": default_threads,
        "rows": args.rows, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
        "competing_jobs": args.jobs, "idle": idle, "loaded": loaded,
        "loaded_one_vs_default": round(loaded["one"]["tokens_per_s"] / loaded["default"]["tokens_per_s"], 2),
        "idle_one_vs_default": round(idle["one"]["tokens_per_s"] / idle["default"]["tokens_per_s"], 2),
    }
    print(f"one thread vs default: x{result['idle_one_vs_default']} idle, x{result['loaded_one_vs_default']} "
          f"with {args.jobs} competing job(s)")
    print(f"wrote {write_json(args.out, result)}")


if __name__ == "__main__":
    main()
