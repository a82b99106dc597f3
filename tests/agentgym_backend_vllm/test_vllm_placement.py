"""Each learner rank's vLLM engine sits on that rank's GPU, under torchrun and under the trainer's spawning.

The fake vLLM records the CUDA device vLLM's worker would take for the EngineArgs the backend built
(``external_launcher``: ``cuda:LOCAL_RANK``; the single-process executor: ``cuda:0``); the test maps it
through each rank's ``CUDA_VISIBLE_DEVICES`` to the GPU of the machine.
"""

from __future__ import annotations

import json

import pytest

from agentgym_core.rl.distributed import spawn


@pytest.mark.parametrize("visible", [None, "4,6"])
def test_every_ranks_engine_takes_its_own_gpu_under_both_launchers(tmp_path, tiny_model_dir, monkeypatch, visible):
    from placement_ranks import build_engines

    monkeypatch.setenv("AGENTGYM_STRICT_COLLECTIVES", "cuda")
    spawn(build_engines, 2, str(tiny_model_dir), str(tmp_path), visible)
    found = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    gpus = ["0", "1"] if visible is None else ["4", "6"]
    assert [f["torchrun"] for f in found] == gpus
    assert [f["spawn"] for f in found] == gpus


def test_one_process_keeps_vllms_default_executor(fake_vllm, tiny_model_dir, monkeypatch):
    from agentgym_backend_vllm import make_backend
    from agentgym_backend_vllm.engine import engine_placement

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    engine = make_backend({"model": str(tiny_model_dir)}).engine
    assert engine.args.distributed_executor_backend is None and engine.cuda_device.index == 0
    assert engine_placement({"WORLD_SIZE": "8", "RANK": "11", "LOCAL_RANK": "3"}).gpu("0,1,2,5") == "5"


def test_several_ranks_refuse_an_engine_they_cannot_place(fake_vllm, tiny_model_dir, monkeypatch):
    from agentgym_backend_vllm import make_backend

    from agentgym_core.plugins import PluginError

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(PluginError, match="engine_in_this_process=false with several learner ranks"):
        make_backend({"model": str(tiny_model_dir), "engine_in_this_process": False})
    with pytest.raises(PluginError, match="tensor_parallel_size=2 with several learner ranks"):
        make_backend({"model": str(tiny_model_dir), "tensor_parallel_size": 2})
