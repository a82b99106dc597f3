"""Rank body of the set-up test (module level, so spawned ranks can import it)."""

from __future__ import annotations

from pathlib import Path


def build_in_rank(model_dir: str, out_dir: str) -> None:
    """Build a 2-rank Learner from ``model_dir`` as the trainer does; each rank records how many times it
    read the weights and which devices its modules held full tensors on before sharding."""
    import torch

    import agentgym_core.models as models
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.distributed import init_from_environment
    from agentgym_core.rl.learner import Learner
    from agentgym_core.rl.setup import load_policy_for_ranks

    torch.set_num_threads(1)
    reads = []
    real = models.load_pretrained
    models.load_pretrained = lambda *a, **kw: reads.append(kw.get("device")) or real(*a, **kw)
    ctx = init_from_environment("cpu")
    config = load_config(
        None,
        ["envs=[{name: word}]", "trainer.learners=2", f"model.path={model_dir}", "algorithm.kl.coef=0.01"],
    )
    model, tokenizer = load_policy_for_ranks(
        config.model, ctx.device, rank=ctx.rank, world_size=ctx.world_size
    )
    before = sorted({str(p.device) for p in model.parameters()})
    learner = Learner(config, model, tokenizer=tokenizer, ctx=ctx)
    policy = {k: v.cpu() for k, v in learner.policy_state_dict().items()}
    from agentgym_core.rl.weight_sync import gather_weights

    reference = {k: v.cpu() for k, v in gather_weights(learner.reference, dtype=None).items()}
    rotary = {k: v.cpu() for k, v in learner.model.named_buffers() if "inv_freq" in k}
    torch.save(
        {
            "reads": reads,
            "devices_before_sharding": before,
            "policy": policy,
            "reference": reference,
            "rotary": rotary,
        },
        Path(out_dir) / f"rank{ctx.rank}.pt",
    )
