"""The collective paths of weight sync and sharded checkpoints on a real NCCL group of one rank
(skipped without a CUDA device; the gloo tests run the same code with several ranks)."""

from __future__ import annotations

import pytest
import torch
from setup_ranks import nccl_world_of_one

from agentgym_core.rl.distributed import spawn


@pytest.mark.gpu
def test_bf16_weights_gathered_on_the_gpu_and_a_sharded_checkpoint_round_trip_over_nccl(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    spawn(nccl_world_of_one, 1, str(tmp_path))
    got = torch.load(tmp_path / "nccl.pt")
    assert got["devices"] == {"cuda:0"}  # gathered and cast on the GPU: no trip through host memory
    for k, v in got["expected"].items():
        assert got["weights"][k].dtype == torch.bfloat16
        torch.testing.assert_close(got["weights"][k], v, atol=0, rtol=0)
    assert got["restored"] and all(float(v.abs().sum()) > 0 for v in got["restored"].values())


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu), "cpu"])
def test_lora_under_fsdp2_gathers_only_the_adapters_and_merges_as_peft_does(tmp_path, device):
    from setup_ranks import lora_world_of_one

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    spawn(lora_world_of_one, 1, str(tmp_path), device)
    got = torch.load(tmp_path / "lora.pt")
    assert got["adapters"] and all(".lora_" in k for k in got["adapters"])
    assert {v for v in got["adapters"].values()} == {(torch.bfloat16, f"{device}:0" if device == "cuda" else "cpu")}
    assert set(got["merged"]) == set(got["expected"])
    for k, v in got["expected"].items():
        torch.testing.assert_close(got["merged"][k], v, atol=1e-5, rtol=0)
    assert not torch.allclose(got["policy"], got["reference"])  # the adapters off: another policy
