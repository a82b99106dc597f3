"""Rank side of test_vllm_placement.py: build the backend's engine (the fake vLLM) as each launcher would."""

from __future__ import annotations

import json
import os
from pathlib import Path


def build_engines(model_dir: str, out_dir: str, visible: str | None) -> None:
    """In one spawned rank: the GPU its engine would take under torchrun, then under the trainer's spawning."""
    import fake_vllm as fake

    from agentgym_core.rl.distributed import init_from_environment, pin_one_gpu, visible_gpus
    from agentgym_core.testing.strict_collectives import install

    install("cuda")  # the ranks' group opens as under NCCL's rules
    ctx = init_from_environment("cpu")
    fake.install_in_process()
    from agentgym_backend_vllm import make_backend

    def gpu() -> str:
        engine = make_backend({"model": model_dir}).engine
        index = engine.cuda_device.index
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        return str(index) if seen is None else seen.split(",")[index]

    # torchrun: every rank sees every GPU and has LOCAL_RANK = its place on this machine
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    found = {"torchrun": gpu()}
    # the trainer's own spawning pins one GPU per rank before anything starts CUDA (trainer._rank_main)
    pin_one_gpu(visible_gpus(visible, 8), ctx.rank)
    found["spawn"] = gpu()
    Path(out_dir, f"rank{ctx.rank}.json").write_text(json.dumps(found))
