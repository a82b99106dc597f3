"""Rollout throughput: the decode engines and the round-synchronous baselines, on the same backend and workload.

For each parallelism P in --parallel (default 1, 8, 32) the same workload -- P BabyAI test tasks,
sampling at temperature 1 with a fixed seed, the same turn budget and token caps, the same loaded
backend -- is rolled out once per mode, in this run:

* ``engine``: the backend's own decode engine as designed: a trajectory is sampled again as soon as
  its own environment answers (no round barrier), it keeps its KV cache between turns (only new
  tokens prefilled), and a prompt prefix several trajectories start with (the instruction) is read
  once per rollout.
* ``library``: the same scheduling on transformers' continuous-batching engine
  (``decode_engine='library'``: paged KV cache with prefix sharing, CUDA graphs on a GPU).
* ``round-sync``: the own engine, but every turn waits for the slowest trajectory before anyone
  samples (the anchor's round barrier). Only the scheduling differs from ``engine``.
* ``round-sync-reread``: the anchor's rollout: the round barrier AND every prompt read in full every
  turn (no KV cache kept between turns, no shared prefix), as a round-synchronous loop that
  re-renders the conversation each round does (also this engine before sessions existed).
* ``generate``: bare ``model.generate`` each round over every prompt, left-padded, read in full
  (what a loop without any engine of ours does).

On a GPU every mode also reports the memory-bound floor (bench/memory_floor.py: weights + KV bytes
per decode step over the card's peak bandwidth, at P rows and the run's mean context) and the
fraction of it reached. The JSON names the decode engine and attention kernel each mode ran on.

Prints trajectories/min and sampled tokens/s per mode and the speedups of ``engine`` over each
baseline, with the 1-minute load average, and writes bench/results/rollout.json.

    python bench/rollout.py --threads 1                       # SmolLM2-135M on BabyAI, P = 1, 8, 32, 4 turns
    python bench/rollout.py --model tiny --parallel 1 8       # a quick smoke run with a tiny random model
    python bench/rollout.py --threads 1 --parallel 4 --max-rounds 3 --max-new-tokens 32 \
        --modes engine library round-sync-reread generate     # the four decode modes (bench/README.md)

On a GPU (no model hub there): ``--model qwen2.5-1.5b-shape`` builds a random model of that shape
(bench/gpu_rl_step.py's), and ``--lend-float32`` samples the way the trainer's rollouts do when
they share the learner's module: the float32 module is lent to the backend (which samples from a
bfloat16 copy of it on a GPU). The JSON records the device's name, the sampling dtype and each
mode's peak GPU memory:

    python bench/rollout.py --device cuda --model qwen2.5-1.5b-shape --lend-float32 \
        --parallel 32 --max-rounds 6 --max-new-tokens 96 --modes engine library round-sync-reread generate

``--allow-cudnn-attention`` samples as the backend did before it ruled cuDNN's attention out (the
baseline of that change: run the same command with and without it), and ``--profile DIR`` writes a
cProfile of each mode, the way the host-side cost of that attention was found.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from pathlib import Path

import torch
import transformers
from common import load_backend, write_json

from agentgym_core.plugins import PluginManager
from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams

MODES = {  # name -> (synchronous, reuse_kv_cache, share_prefixes, decoder: own / library engine or bare generate)
    "engine": (False, True, True, "own"),
    "library": (False, True, True, "library"),
    "round-sync": (True, True, True, "own"),
    "round-sync-reread": (True, False, False, "own"),
    "generate": (True, False, False, "generate"),
}


class PlainGenerate:
    """The backend's tokenizer side and scoring, with sampling by one bare ``model.generate`` call per round
    (left-padded prompts, every prompt read in full; no running batch, no sessions)."""

    name = "plain-generate"

    def __init__(self, backend) -> None:
        self.backend = backend
        self.eos_token_ids = backend.eos_token_ids

    def apply_chat_template(self, messages, *, add_generation_prompt):
        return self.backend.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)

    def encode(self, text):
        return self.backend.encode(text)

    def decode(self, token_ids):
        return self.backend.decode(token_ids)

    def score(self, sequences, *, temperature=1.0):
        return self.backend.score(sequences, temperature=temperature)

    def load_weights(self, state_dict):
        self.backend.load_weights(state_dict)

    @torch.inference_mode()
    def generate(self, prompts, params, *, max_new_tokens=None):
        from agentgym_core.rollout.backend import Sample

        backend, model = self.backend, self.backend.model
        caps = [min(params.max_new_tokens, int(c)) for c in (max_new_tokens or [params.max_new_tokens] * len(prompts))]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), backend.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
        with backend.sampling_kernels():
            out = model.generate(
                input_ids=ids.to(backend.device), attention_mask=mask.to(backend.device), max_new_tokens=max(caps),
                do_sample=params.temperature > 0, temperature=params.temperature or None, top_k=params.top_k or None,
                top_p=params.top_p, eos_token_id=sorted(self.eos_token_ids), pad_token_id=backend.pad_token_id,
                return_dict_in_generate=True, output_logits=True)
        logits = torch.stack(out.logits, 1).float() / params.logprob_temperature  # (B, N, V)
        new = out.sequences[:, width:]  # (B, N)
        lps = torch.log_softmax(logits, -1).gather(-1, new[..., None]).squeeze(-1).tolist()
        samples = []
        for row, lp, cap in zip(new.tolist(), lps, caps, strict=True):
            n = next((i + 1 for i, t in enumerate(row[:cap]) if t in self.eos_token_ids), min(cap, len(row)))
            reason = "eos" if row[n - 1] in self.eos_token_ids else "length"
            samples.append(Sample(token_ids=row[:n], logprobs=lp[:n], finish_reason=reason))
        return samples


def mean_context(trajs) -> float:
    """The mean number of tokens a sampled token attends to (its index in the trajectory)."""
    positions = [i for t in trajs for i, m in enumerate(t.loss_mask) if m]
    return sum(positions) / max(1, len(positions))


def run_once(backend, env_cls, tasks, *, mode: str, args) -> dict[str, float]:
    synchronous, reuse, share, decoder = MODES[mode]
    backend.share_prefixes = share
    if decoder != "generate":
        backend.set_decode_engine(decoder)
    config = EngineConfig(
        sampling=SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed),
        max_turns=args.max_rounds, synchronous=synchronous, reuse_kv_cache=reuse, env_workers=32,
        step_timeout_s=600,
    )
    stats = backend.sessions.stats
    prefilled, reused, shared = stats.prefilled_tokens, stats.reused_tokens, stats.shared_prefix_tokens
    load = os.getloadavg()[0]
    if backend.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(backend.device)
    sampler = PlainGenerate(backend) if decoder == "generate" else backend
    with RolloutEngine(sampler, env_cls, num_envs=len(tasks), config=config, env_name="babyai") as engine:
        start = time.perf_counter()
        trajs = engine.run([EpisodeSpec(task_id=t) for t in tasks])
        wall = time.perf_counter() - start
    tokens = sum(t.num_sampled_tokens for t in trajs)
    floor = {}
    if backend.device.type == "cuda":
        floor = memory_floor_of(backend, rows=len(tasks), context=mean_context(trajs), bandwidth=args.bandwidth)
        if floor:
            floor["fraction_of_floor"] = tokens / wall / floor["floor_tokens_per_s"]
    return {
        "decode_engine": "generate" if decoder == "generate" else backend.decode_engine,
        "attention": backend.attention, "mean_context": mean_context(trajs), **floor,
        "trajectories": len(trajs), "wall_s": wall, "trajectories_per_min": 60 * len(trajs) / wall,
        "sampled_tokens": tokens, "tokens_per_s": tokens / wall, "generation_calls": engine.stats.generation_calls,
        "gen_s": engine.stats.gen_seconds, "turns": sum(t.num_turns for t in trajs), "failed": engine.stats.failed,
        "successes": sum(t.success for t in trajs),
        "prefilled_tokens": stats.prefilled_tokens - prefilled, "reused_tokens": stats.reused_tokens - reused,
        "shared_prefix_tokens": stats.shared_prefix_tokens - shared,
        "load_avg_1m_start": load, "load_avg_1m_end": os.getloadavg()[0],
        **({"peak_gpu_allocated_gb": torch.cuda.max_memory_allocated(backend.device) / 1e9}
           if backend.device.type == "cuda" else {}),
    }


def memory_floor_of(backend, *, rows: int, context: float, bandwidth: float | None) -> dict[str, float]:
    """The memory-bound floor of decoding on this card at ``rows`` rows and ``context`` tokens (memory_floor.py);
    empty when the card's bandwidth is unknown (pass --bandwidth)."""
    from memory_floor import card_bandwidth, decode_floor, kv_bytes_per_token, weight_bytes

    bandwidth = bandwidth or card_bandwidth(torch.cuda.get_device_name(backend.device))
    if bandwidth is None:
        return {}
    weights = weight_bytes(backend.model)
    kv = kv_bytes_per_token(backend.model.config, (backend.kv_dtype or next(backend.model.parameters()).dtype).itemsize)
    return {"floor_tokens_per_s": decode_floor(weights=weights, kv_per_token=kv, rows=rows, mean_context=context,
                                               bandwidth=bandwidth),
            "bandwidth_bytes_per_s": bandwidth, "weight_bytes": weights, "kv_bytes_per_token": kv}


def build_backend(args) -> object:
    """The backend the run measures: loaded from --model, or (--lend-float32) lent a float32 module."""
    model = args.model
    if model == "qwen2.5-1.5b-shape":  # random weights of that shape, saved where the backend loads them
        import tempfile

        from common import save_random_qwen2
        from gpu_rl_step import QWEN2_5_1_5B

        model = tempfile.mkdtemp(prefix="rollout-bench-model-")
        device = "cuda" if args.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
        save_random_qwen2(model, QWEN2_5_1_5B, tokenizer_dir=args.tokenizer, device=device, dtype=torch.bfloat16)
    if not args.lend_float32:
        return load_backend(model, threads=args.threads, device=args.device, prefill=args.prefill)
    from agentgym_backend_transformers import make_backend
    from agentgym_backend_transformers.backend import pick_device
    from agentgym_core.models import load_pretrained

    if args.threads:
        torch.set_num_threads(args.threads)
    if model == "tiny":
        from agentgym_core.testing.tiny_model import tiny_chat_model

        module, tokenizer = tiny_chat_model()
        module.to(pick_device(args.device))
    else:
        module, tokenizer = load_pretrained(model, device=pick_device(args.device), dtype="float32")
    return make_backend({"prefill": args.prefill}, model=module, tokenizer=tokenizer)


def profiled(call, stem: Path):
    """``call()`` under cProfile; writes ``stem``.prof and ``stem``.txt (the functions by own time, then
    by cumulative time). On a GPU, time spent inside an op's call that does not wait for the device
    (no ``tolist``/``item`` near the top) is host work: launches, or plans built per shape."""
    import cProfile
    import io
    import pstats

    stem.parent.mkdir(parents=True, exist_ok=True)
    with cProfile.Profile() as calls:
        result = call()
    calls.dump_stats(stem.with_suffix(".prof"))
    text = io.StringIO()
    for order in ("tottime", "cumulative"):
        pstats.Stats(calls, stream=text).sort_stats(order).print_stats(40)
    stem.with_suffix(".txt").write_text(text.getvalue())
    print(f"profile: {stem}.txt", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model spec, or 'tiny' (random tiny Llama)")
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--max-rounds", type=int, default=4, help="turn budget per trajectory (the BabyAI recipe starts at 4)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (use 1 on a shared machine)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--prefill", default="auto", choices=["auto", "batched", "per_row"],
                        help="how rows joining the batch are read (backend option; auto = per_row on CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default=None,
                        help="a Hugging Face tokenizer folder for --model qwen2.5-1.5b-shape (default: the embedded model's)")
    parser.add_argument("--lend-float32", action="store_true",
                        help="lend the backend a float32 module, as the trainer does when rollouts share its module")
    parser.add_argument("--allow-cudnn-attention", action="store_true",
                        help="let torch pick cuDNN's attention while sampling, as the backend did before it "
                             "ruled it out (the baseline for that change; matters on Hopper GPUs only)")
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="profile each mode with cProfile into DIR (the profiler slows every mode: read its "
                             "tables, not the speeds)")
    parser.add_argument("--bandwidth", type=float, default=None,
                        help="the GPU's peak memory bandwidth in bytes/s, for a card memory_floor.py does not know")
    parser.add_argument("--out", default="bench/results/rollout.json")
    args = parser.parse_args()
    backend = build_backend(args)
    backend.allow_cudnn_attention = args.allow_cudnn_attention
    env_cls = PluginManager(autoload=True, allow=["babyai"]).env_class("babyai")
    test = env_cls.tasks().split("test")
    results = {"model": args.model, "device": str(backend.device), "torch_threads": torch.get_num_threads(),
               "cpu_count": os.cpu_count(), "max_rounds": args.max_rounds, "max_new_tokens": args.max_new_tokens,
               "prefill": args.prefill, "lend_float32": args.lend_float32,
               "allow_cudnn_attention": args.allow_cudnn_attention, "torch": torch.__version__,
               "device_name": torch.cuda.get_device_name(backend.device) if backend.device.type == "cuda" else "cpu",
               "module_dtype": str(next(backend.source.parameters()).dtype),
               "sampling_dtype": str(next(backend.model.parameters()).dtype),
               "transformers": transformers.__version__,
               "modes": {m: {"synchronous": s, "reuse_kv_cache": r, "share_prefixes": p, "decoder": d}
                         for m, (s, r, p, d) in MODES.items()}, "runs": []}
    print(f"{'P':>3} {'mode':>18} {'traj/min':>9} {'tok/s':>7} {'floor':>7} {'of floor':>8} {'wall s':>7} "
          f"{'turns':>5} {'attention':>17} {'load':>5}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for p in args.parallel:
        tasks = [test[i % len(test)] for i in range(p)]
        row: dict = {"parallel": p}
        for mode in args.modes:
            once = functools.partial(run_once, backend, env_cls, tasks, mode=mode, args=args)
            r = profiled(once, Path(args.profile) / f"P{p}_{mode}") if args.profile else once()
            row[mode] = r
            floor = f"{r['floor_tokens_per_s']:>7.0f} {r['fraction_of_floor']:>8.1%}" if "floor_tokens_per_s" in r \
                else f"{'-':>7} {'-':>8}"
            print(f"{p:>3} {mode:>18} {r['trajectories_per_min']:>9.2f} {r['tokens_per_s']:>7.2f} {floor} "
                  f"{r['wall_s']:>7.1f} {r['turns']:>5} {r['attention']:>17} {r['load_avg_1m_end']:>5.1f}", flush=True)
        if "engine" in row:
            for base in (m for m in args.modes if m != "engine"):
                speedup = row["engine"]["trajectories_per_min"] / row[base]["trajectories_per_min"]
                row[f"speedup_vs_{base}"] = speedup
                print(f"{p:>3} engine vs {base}: x{speedup:.2f} traj/min, "
                      f"x{row['engine']['tokens_per_s'] / row[base]['tokens_per_s']:.2f} tok/s", flush=True)
        results["runs"].append(row)
        write_json(out, results)  # partial results survive an interrupted run
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
