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
    from agentgym_core.rl.policy import load_policy_for_ranks

    torch.set_num_threads(1)
    reads = []
    real = models.load_pretrained
    models.load_pretrained = lambda *a, **kw: reads.append(kw.get("device")) or real(*a, **kw)
    from agentgym_core.testing.strict_collectives import install

    install("cuda")  # refuse what NCCL would: a CPU tensor on the device group, objects or barriers there
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


def nccl_world_of_one(out_dir: str) -> None:
    """A real NCCL group of one rank on cuda:0: shard the tiny model with FSDP2, gather bf16 weights for
    the engine, write and read a sharded checkpoint; rank 0 saves what it saw."""
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from agentgym_core.rl.weight_sync import gather_weights
    from agentgym_core.testing.tiny_model import tiny_chat_model
    from agentgym_core.training.checkpoint import load_sharded, save_sharded

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    model, _ = tiny_chat_model(seed=0)
    expected = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    model.to("cuda")
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    weights = gather_weights(model, dtype=torch.bfloat16)
    save_sharded(Path(out_dir) / "sharded", {"model": model.state_dict()})
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    state = {"model": model.state_dict()}
    load_sharded(Path(out_dir) / "sharded", state)
    restored = {k: v.full_tensor().cpu() for k, v in model.state_dict().items() if hasattr(v, "full_tensor")}
    torch.save(
        {
            "weights": {k: v.cpu() for k, v in weights.items()},
            "devices": {str(v.device) for v in weights.values()},
            "expected": expected,
            "restored": restored,
        },
        Path(out_dir) / "nccl.pt",
    )
    dist.destroy_process_group()
    os.environ.pop("RANK", None)


def lora_world_of_one(out_dir: str, device: str) -> None:
    """LoRA under FSDP2 in a group of one rank (NCCL on ``cuda``, gloo on ``cpu``): gather the adapters alone
    in bf16 for the rollout engine, score with the adapters off (the KL reference), and merge the gathered
    weights as the sharded checkpoint does; rank 0 saves what it saw beside peft's own merge."""
    import copy
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.learner import is_adapter_weight
    from agentgym_core.rl.policy import wrap_lora
    from agentgym_core.rl.weight_sync import gather_weights
    from agentgym_core.testing.tiny_model import tiny_chat_model
    from agentgym_core.training.checkpoint import merged_lora_weights

    on_gpu = device == "cuda"
    if on_gpu:
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if on_gpu else "gloo", rank=0, world_size=1,
                            **({"device_id": torch.device("cuda", 0)} if on_gpu else {}))
    config = load_config(None, ["envs=[{name: word}]", "model.lora.enabled=true", "model.lora.r=4",
                                "model.lora.target_modules=[q_proj, v_proj]"])
    model, _ = tiny_chat_model(seed=0)
    torch.manual_seed(0)
    model = wrap_lora(model, config.model)
    with torch.no_grad():  # trained adapters: B is zero when fresh, and merging it would test nothing
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    expected = {k: v for k, v in copy.deepcopy(model).merge_and_unload().state_dict().items()}
    model.to(device)
    for layer in model.base_model.model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    adapters = gather_weights(model, dtype=torch.bfloat16, include=is_adapter_weight)
    ids = torch.tensor([[1, 2, 3, 4]], device=device)
    with torch.no_grad():
        with model.disable_adapter():
            reference = model(input_ids=ids).logits.float().cpu()
        policy = model(input_ids=ids).logits.float().cpu()
    merged = merged_lora_weights(model, dict(gather_weights(model, dtype=None)))
    torch.save({"adapters": {k: (v.dtype, str(v.device)) for k, v in adapters.items()},
                "merged": {k: v.cpu() for k, v in merged.items()}, "expected": expected,
                "reference": reference, "policy": policy}, Path(out_dir) / "lora.pt")
    dist.destroy_process_group()
    os.environ.pop("RANK", None)
