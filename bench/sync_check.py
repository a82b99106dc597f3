"""What the check after a weight sync costs: the learner's probe forward and the backend's probe score,
against the weight load it follows (the transformers backend with its own copy of the model).

    python bench/sync_check.py [--model smollm2-135m-instruct] [--repeats 5]

Prints seconds per call (median of the repeats) and writes ``bench/results/sync_check.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch


def median_seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.guards import WeightSyncProbe
    from agentgym_core.rl.learner import Learner
    from agentgym_core.rl.policy import load_policy

    config = load_config(None, ["envs=[{name: guess}]", f"model.path={args.model}", "model.device=cpu",
                                "algorithm.kl.coef=0"])
    model, tokenizer = load_policy(config.model, device="cpu")
    backend = TransformersBackend(copy.deepcopy(model), tokenizer)
    learner = Learner(config, model, tokenizer=tokenizer)
    probe = WeightSyncProbe.from_tokenizer(tokenizer, tolerance=0.1)
    weights = learner.rollout_weights() if hasattr(learner, "rollout_weights") else learner.policy_state_dict()

    load = median_seconds(lambda: backend.load_weights(weights), args.repeats)
    learner_side = median_seconds(lambda: probe.expect(learner, 0), args.repeats)
    expected = probe.expect(learner, 0)
    backend_side = median_seconds(lambda: expected.check(backend), args.repeats)
    result = {
        "model": args.model, "threads": args.threads, "probe_tokens": len(probe.token_ids),
        "load_weights_s": load, "learner_probe_s": learner_side, "backend_probe_s": backend_side,
        "check_over_load": (learner_side + backend_side) / load, "gap_nats_per_token": expected.gap,
        "machine": "2-core CPU, shared and loaded",
    }
    print(json.dumps(result, indent=2))
    out = Path(__file__).parent / "results" / "sync_check.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
