"""Rank bodies of the weight-sync tests (module level, so spawned ranks can import them)."""

from __future__ import annotations

import os
from pathlib import Path


def gather_in_rank(out_dir: str) -> None:
    """Build a 2-rank FSDP2 Learner over the tiny model; rank 0 saves what policy_state_dict(bf16) gave."""
    import torch
    import torch.distributed as dist

    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.distributed import init_from_environment
    from agentgym_core.rl.learner import Learner
    from agentgym_core.testing.tiny_model import tiny_chat_model

    torch.set_num_threads(1)
    from agentgym_core.testing.strict_collectives import install

    install("cuda")  # refuse what NCCL would: a CPU tensor on the device group, objects or barriers there
    ctx = init_from_environment("cpu")
    model, tokenizer = tiny_chat_model(seed=0)
    config = load_config(None, ["envs=[{name: word}]", "trainer.learners=2", "algorithm.kl.coef=0"])
    learner = Learner(config, model, tokenizer=tokenizer, ctx=ctx)
    weights = learner.policy_state_dict(torch.bfloat16)
    dist.barrier(group=ctx.host_group)
    if ctx.rank == 0:
        torch.save(
            {
                "weights": dict(weights),
                "bytes": learner.weight_sync_bytes,
                "devices": sorted({str(t.device) for t in weights.values()}),
            },
            Path(out_dir) / "rank0.pt",
        )
    os.environ.pop("RANK", None)
