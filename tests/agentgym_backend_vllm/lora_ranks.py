"""Rank side of test_vllm_lora.py: LoRA on FSDP2 learner ranks with the vLLM backend (the fake) on each rank."""

from __future__ import annotations

import json
import os
from pathlib import Path

LORA = ["model.lora.enabled=true", "model.lora.r=4", "model.lora.alpha=8", "model.lora.target_modules=[q_proj, v_proj]",
        "algorithm.packing=false"]


def train_rank(model_dir: str, out_dir: str) -> None:
    """Two steps of the tiny trainer on this rank, sampling with the fake vLLM engine; then what the engine holds:
    the adapter tensors (``rank{r}.safetensors``) and the versions it kept and removed (``rank{r}.json``)."""
    import fake_vllm as fake
    import torch
    from learner_ranks import BASE, RANKS_LR
    from safetensors.torch import save_file
    from word_env import WordPlugin

    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.policy import wrap_lora
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.strict_collectives import install
    from agentgym_core.testing.tiny_model import tiny_chat_model

    install("cuda")  # a collective NCCL would refuse fails here
    fake.install_in_process()
    torch.set_num_threads(1)
    pm = PluginManager(autoload=True, allow=["estimators", "vllm"])
    pm.register(WordPlugin(), "word-test")
    config = load_config(None, [
        *BASE, *RANKS_LR, *LORA, f"model.path={model_dir}", "model.device=cpu", "rollout.backend=vllm",
        f"trainer.run_dir={Path(out_dir) / 'run'}", "trainer.learners=2", "trainer.save_every=2"])
    model, tokenizer = tiny_chat_model(seed=0)  # what model_dir holds, which the engine loads
    torch.manual_seed(0)
    train(config, plugin_manager=pm, model=wrap_lora(model, config.model), tokenizer=tokenizer)
    (engine,) = fake.ENGINES
    rank = os.environ["RANK"]
    save_file({k: v.contiguous() for k, v in next(iter(engine.loras.values())).tensors.items()},
              str(Path(out_dir, f"rank{rank}.safetensors")))
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({
        "versions": sorted(engine.loras), "removed": [c[1] for c in engine.calls if c[0] == "remove_lora"]}))
