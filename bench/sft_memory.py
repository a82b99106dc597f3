"""Where an SFT step of the main job's shape spends resident memory (SmolLM2-135M on CPU).

The main job's SFT phase (examples/babyai_grpo_cpu.yaml: 8 episodes per step, gradient checkpointing,
bf16 autocast, AdamW) peaks far above what one step in a fresh process needs. This script runs such
steps on BabyAI expert episodes and reads the peak RSS of every part (each forward, each backward, the
optimizer step: Linux's high-water mark, reset per part) and the RSS left after each step once
``release_memory()`` has run (the floor the next step starts from). The step is
:func:`agentgym_core.finetune.sft.sft_update` taken apart, under one autocast context as the
fine-tuning loop runs it. Each ``--compare-*`` option adds a run of the same steps with one thing
changed; every run is a fresh process, the first is the baseline, and the others are reported with
their ratios to it:

* ``--compare-env VAR=VALUE`` (repeatable, one run each): an environment variable read when the
  process starts, e.g. ``ONEDNN_PRIMITIVE_CACHE_CAPACITY=0`` (oneDNN's primitive cache off) or
  ``MALLOC_MMAP_THRESHOLD_=N`` (glibc serves blocks of N bytes and more from their own mappings);
* ``--compare-micro-batch-tokens N``: forwards of at most N tokens instead of ``--micro-batch-tokens``;
* ``--compare-no-autocast-cache``: bf16 autocast without its cache of the weights' bf16 casts, which
  otherwise lives for the whole step (``runtime.autocast_cache``);
* ``--compare-optimizer-state-to-disk``: AdamW's moments in a file except inside ``optimizer.step()``
  (``runtime.optimizer_state_to_disk``), so the forward and backward passes run without them;
* ``--compare-with "OPTIONS"`` (repeatable, one run each): the baseline's options plus these, for
  changes that go together, e.g. ``"--micro-batch-tokens 1024 --gradient-checkpointing 0"``.

``--gradient-checkpointing 0``, ``--gradient-checkpointing-above-tokens N``, ``--autocast-cache 0``,
``--lean-activations 0``, ``--onednn-primitive-cache N`` and ``--optimizer-state-to-disk 1`` change the
baseline itself (the main job's runtime settings: ``--autocast-cache 0 --optimizer-state-to-disk 1
--heap-trim-interval 1 --onednn-primitive-cache 32``; before 2026-12-07 the cap was given as
``ONEDNN_PRIMITIVE_CACHE_CAPACITY=32`` in the environment, which leaves PyTorch's own cache uncapped).

Writes bench/results/sft_memory.json.

    python bench/sft_memory.py --compare-env ONEDNN_PRIMITIVE_CACHE_CAPACITY=0   # 2k-token micro-batches
    python bench/sft_memory.py --compare-micro-batch-tokens 1024 --compare-no-autocast-cache
    python bench/sft_memory.py --compare-optimizer-state-to-disk --out bench/results/sft_memory_optimizer_on_disk.json
    python bench/sft_memory.py --optimizer-state-to-disk 1 --heap-trim-interval 1 \
        --compare-with "--micro-batch-tokens 1024 --gradient-checkpointing-above-tokens 1024" \
        --out bench/results/sft_memory_checkpointing.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def rss_gb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8, help="episodes per optimizer step")
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=1000, help="longest episode used (tokens)")
    parser.add_argument("--compare-env", action="append", default=[], metavar="VAR=VALUE",
                        help="also run with this environment variable set and compare (repeatable)")
    parser.add_argument("--compare-micro-batch-tokens", type=int, default=None, metavar="N",
                        help="also run with micro-batches of at most N tokens and compare")
    parser.add_argument("--compare-no-autocast-cache", action="store_true",
                        help="also run without autocast's cache of bf16 weight casts and compare")
    parser.add_argument("--autocast-cache", type=int, choices=(0, 1), default=1,
                        help="1: keep the weights' bf16 casts for the whole step (runtime.autocast_cache)")
    parser.add_argument("--compare-optimizer-state-to-disk", action="store_true",
                        help="also run with AdamW's moments in a file except inside optimizer.step()")
    parser.add_argument("--optimizer-state-to-disk", type=int, choices=(0, 1), default=0,
                        help="1: AdamW's moments in a file except inside optimizer.step() (the main job's setting)")
    parser.add_argument("--gradient-checkpointing", type=int, choices=(0, 1), default=1,
                        help="0: keep every layer's activations for the backward pass instead of recomputing them")
    parser.add_argument("--gradient-checkpointing-above-tokens", type=int, default=None, metavar="N",
                        help="checkpoint only forwards of more than N tokens (model.gradient_checkpointing_above_tokens)")
    parser.add_argument("--onednn-primitive-cache", type=int, default=None, metavar="N",
                        help="keep at most N oneDNN primitives, in oneDNN's cache and PyTorch's "
                        "(runtime.onednn_primitive_cache; 32 in the main job)")
    parser.add_argument("--lean-activations", type=int, choices=(0, 1), default=1,
                        help="0: transformers' own RMS norms and MLPs, which keep more for backward "
                        "(model.lean_activations)")
    parser.add_argument("--heap-trim-interval", type=float, default=0.0, metavar="S",
                        help="trim the C heap every S seconds from a thread, as training runs do "
                        "(runtime.heap_trim_interval_s, 1.0 there); 0: only after each step")
    parser.add_argument("--compare-with", action="append", default=[], metavar='"OPTIONS"',
                        help="also run with these options added to the baseline's and compare (repeatable)")
    parser.add_argument("--expert-tasks", type=int, default=100, help="BabyAI training tasks the expert plays")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "sft_memory.json"))
    parser.add_argument("--one-setting", help=argparse.SUPPRESS)  # internal: measure in this process, JSON here
    args = parser.parse_args()
    if args.one_setting:
        Path(args.one_setting).write_text(json.dumps(measure(args)))
        return

    sys.path.insert(0, str(Path(__file__).parent))
    from common import write_json

    # label -> (environment changes, extra arguments); the first is the baseline
    settings: dict[str, tuple[dict[str, str], list[str]]] = {"baseline": ({}, [])}
    for assignment in args.compare_env:
        name, equals, value = assignment.partition("=")
        if not equals or not name:
            raise SystemExit(f"--compare-env {assignment!r}: write VAR=VALUE")
        settings[assignment] = ({name: value}, [])
    if args.compare_micro_batch_tokens is not None:
        settings[f"micro-batches of {args.compare_micro_batch_tokens} tokens"] = (
            {}, ["--micro-batch-tokens", str(args.compare_micro_batch_tokens)])
    if args.compare_no_autocast_cache:
        settings["no autocast cache"] = ({}, ["--autocast-cache", "0"])
    if args.compare_optimizer_state_to_disk:
        settings["optimizer state on disk"] = ({}, ["--optimizer-state-to-disk", "1"])
    for options in args.compare_with:
        settings[options] = ({}, shlex.split(options))
    runs, load = {}, os.getloadavg()[0]  # what else ran: the times are those of a shared CPU when it is high
    with tempfile.TemporaryDirectory() as tmp:
        for label, (changes, extra) in settings.items():
            env = os.environ | changes
            out = Path(tmp) / "run.json"
            print(f"{label}:", flush=True)
            subprocess.run([sys.executable, __file__, *_measure_arguments(args), *extra, "--one-setting", str(out)], env=env,
                           check=True)
            runs[label] = {"environment": changes, "arguments": extra, **json.loads(out.read_text())}
    internal = ("one_setting",)
    result = {"settings": {k: v for k, v in vars(args).items() if k not in internal},
              "load_avg_1m_start": load, "runs": runs, "ratios_to_baseline": {}}
    base = runs["baseline"]
    for label, run in runs.items():
        if label != "baseline":
            ratios = {"peak": run["peak_gb"] / base["peak_gb"], "time": run["seconds"] / base["seconds"]}
            result["ratios_to_baseline"][label] = ratios
            print(f"{label}: peak {run['peak_gb']:.2f} GB (x{ratios['peak']:.3f}), "
                  f"{run['seconds']:.0f} s (x{ratios['time']:.2f}) vs baseline {base['peak_gb']:.2f} GB, "
                  f"{base['seconds']:.0f} s")
    print(f"wrote {write_json(args.out, result)}")


def _measure_arguments(args: argparse.Namespace) -> list[str]:
    """The options a measuring process needs (the comparisons are the parent's)."""
    return ["--steps", str(args.steps), "--batch-size", str(args.batch_size), "--max-tokens", str(args.max_tokens),
            "--expert-tasks", str(args.expert_tasks), "--threads", str(args.threads),
            "--micro-batch-tokens", str(args.micro_batch_tokens),
            "--optimizer-state-to-disk", str(args.optimizer_state_to_disk),
            "--gradient-checkpointing", str(args.gradient_checkpointing),
            "--heap-trim-interval", str(args.heap_trim_interval), "--autocast-cache", str(args.autocast_cache),
            "--lean-activations", str(args.lean_activations),
            *(["--onednn-primitive-cache", str(args.onednn_primitive_cache)]
              if args.onednn_primitive_cache is not None else []),
            *(["--gradient-checkpointing-above-tokens", str(args.gradient_checkpointing_above_tokens)]
              if args.gradient_checkpointing_above_tokens is not None else [])]


def measure(args: argparse.Namespace) -> dict:
    """The steps in this process: per-part peaks, the floor after each step, seconds."""
    import torch

    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.common import padded_mask, token_budget_chunks
    from agentgym_core.finetune.config import CollectConfig
    from agentgym_core.finetune.data import load_examples
    from agentgym_core.finetune.sft import sft_loss
    from agentgym_core.rl.config import ModelConfig, OptimConfig, RuntimeConfig
    from agentgym_core.rl.forward import forward_tokens, mixed_precision
    from agentgym_core.rl.policy import load_policy
    from agentgym_core.training.memory import HeapTrimmer, PhasePeak, release_memory
    from agentgym_core.training.optimizer import build_optimizer

    with tempfile.TemporaryDirectory() as tmp:  # the expert's episodes, collected afresh in each process
        data = Path(tmp) / "expert.jsonl"
        collect(CollectConfig(env="babyai", policy="expert", n=args.expert_tasks, shuffle=True, max_turns=12,
                              out=str(data)), progress=False)
        examples = [e for e in load_examples(data) if len(e.token_ids) <= args.max_tokens and sum(e.loss_mask)]
    needed = args.steps * args.batch_size
    if len(examples) < needed:
        raise SystemExit(f"{len(examples)} expert episodes of at most {args.max_tokens} tokens, {needed} needed: "
                         "raise --expert-tasks")
    random.Random(0).shuffle(examples)

    model, _ = load_policy(ModelConfig(path="smollm2-135m-instruct",
                                       gradient_checkpointing=bool(args.gradient_checkpointing),
                                       gradient_checkpointing_above_tokens=args.gradient_checkpointing_above_tokens,
                                       lean_activations=bool(args.lean_activations),
                                       mixed_precision="auto"),
                           runtime=RuntimeConfig(threads=args.threads, onednn_primitive_cache=args.onednn_primitive_cache))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer, _ = build_optimizer(params, [], OptimConfig(lr=5e-5), args.steps)
    on_disk = None
    if args.optimizer_state_to_disk:
        from agentgym_core.training.optimizer_on_disk import OptimizerStateOnDisk

        scratch = tempfile.mkdtemp(prefix="sft_memory_", dir=RESULTS.parent)  # on disk, not a memory-backed /tmp
        on_disk = OptimizerStateOnDisk(optimizer, Path(scratch) / "optimizer_state.pt").around_steps()
    release_memory()
    loaded = rss_gb()
    print(f"model loaded: RSS {loaded:.2f} GB")
    steps = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        batch = examples[step * args.batch_size:(step + 1) * args.batch_size]
        mask = padded_mask(batch)
        num_tokens = float(mask.sum())
        lengths = [len(e.token_ids) for e in batch]
        model.train()
        parts = []
        with (HeapTrimmer(args.heap_trim_interval),
              mixed_precision("auto", model, cache=bool(args.autocast_cache))):  # one context per step, as the loop
            for rows in token_budget_chunks(range(len(batch)), lengths, args.micro_batch_tokens):
                with PhasePeak() as forward_peak:
                    stats = forward_tokens(model, [batch[r].token_ids for r in rows], mask[rows],
                                           max_tokens=args.micro_batch_tokens)
                    loss = sft_loss(stats.logprobs, mask[rows], agg="token_mean", num_tokens=num_tokens,
                                    num_seqs=float(len(batch)))
                with PhasePeak() as backward_peak:
                    loss.backward()
                del stats, loss
                parts.append({"tokens": sum(lengths[r] for r in rows), "forward_peak_gb": forward_peak.gb,
                              "backward_peak_gb": backward_peak.gb, "rss_after_gb": rss_gb()})
            with PhasePeak() as optimizer_peak:
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        model.eval()
        if on_disk is not None:
            on_disk.wait_for_write()  # the state being written is still in memory until the write ends
        release_memory()
        peak = max([optimizer_peak.gb] + [max(p["forward_peak_gb"], p["backward_peak_gb"]) for p in parts])
        steps.append({"micro_batches": parts, "optimizer_peak_gb": optimizer_peak.gb, "peak_gb": peak,
                      "floor_after_release_gb": rss_gb()})
        print(f"step {step + 1}: peak {peak:.2f} GB over {len(parts)} micro-batches, "
              f"RSS after release {steps[-1]['floor_after_release_gb']:.2f} GB")
    seconds = time.perf_counter() - t0
    print(f"{args.steps} steps in {seconds:.0f} s", flush=True)
    if on_disk is not None:
        on_disk.close()
        Path(on_disk.path).parent.rmdir()
    return {"loaded_rss_gb": loaded, "steps": steps, "seconds": seconds, "peak_gb": max(s["peak_gb"] for s in steps)}


if __name__ == "__main__":
    main()
