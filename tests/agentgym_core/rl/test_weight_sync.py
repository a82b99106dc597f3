"""Weight sync in the rollout engine's dtype: cast before the per-tensor gather, sizes in the step's metrics."""

from __future__ import annotations

import pytest
import torch
from learner_ranks import run_ranks, train_lines
from weight_sync_ranks import gather_in_rank

from agentgym_core.rl.async_rollouts import _private_copy
from agentgym_core.rl.config import load_config
from agentgym_core.rl.distributed import spawn
from agentgym_core.rl.weight_sync import WeightSnapshot, engine_dtype, gather_weights, weight_bytes
from agentgym_core.testing.tiny_model import tiny_chat_model


def _unique_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once


@pytest.mark.slow
def test_two_sharded_ranks_send_bf16_weights_gathered_per_tensor(tmp_path):
    """2 gloo ranks: every tensor arrives in bfloat16 (2 bytes a parameter), equal to the cast full weights."""
    spawn(gather_in_rank, 2, str(tmp_path))
    got = torch.load(tmp_path / "rank0.pt")
    model, _ = tiny_chat_model(seed=0)
    expected = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items() if k != "lm_head.weight"}
    assert got["weights"].keys() == expected.keys()
    for name, tensor in got["weights"].items():
        assert tensor.dtype == torch.bfloat16, name
        torch.testing.assert_close(tensor, expected[name], atol=0, rtol=0)
    assert got["bytes"] == 2 * _unique_params(model)
    assert got["devices"] == ["cpu"]  # the shards' own device (the GPU under NCCL), never moved elsewhere


def test_one_process_casts_a_copy_and_keeps_its_own_tensors_otherwise():
    model, _ = tiny_chat_model(seed=0)
    cast = gather_weights(model, dtype=torch.bfloat16)
    assert isinstance(cast, WeightSnapshot) and weight_bytes(cast) == 2 * sum(
        v.numel() for v in model.state_dict().values()
    )
    own = gather_weights(model, dtype=None)
    assert not isinstance(own, WeightSnapshot)  # the module's tensors: AsyncRollouts copies them
    assert own["model.embed_tokens.weight"].data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_async_rollouts_copy_only_what_the_learner_still_owns():
    tensor = torch.ones(3)
    snapshot = WeightSnapshot(w=tensor)
    assert _private_copy(snapshot)["w"] is tensor  # new already: not copied a second time
    assert _private_copy({"w": tensor})["w"].data_ptr() != tensor.data_ptr()


def test_engine_dtype_follows_the_recipe_then_the_device():
    named = load_config(None, ["envs=[{name: word}]", "rollout.backend_options={dtype: bfloat16}"])
    plain = load_config(None, ["envs=[{name: word}]"])
    assert engine_dtype(named, torch.device("cpu")) == torch.bfloat16
    assert engine_dtype(plain, torch.device("cpu")) is None
    assert engine_dtype(plain, torch.device("cuda")) == torch.bfloat16


@pytest.mark.slow
def test_a_two_rank_run_reports_bf16_bytes_and_seconds_per_sync(tmp_path):
    run_ranks(2, str(tmp_path / "run"), ["trainer.steps=1", "rollout.backend_options={dtype: bfloat16}"])
    (line,) = train_lines(tmp_path / "run")
    model, _ = tiny_chat_model(seed=0)
    assert line["weight_sync_bytes"] == 2 * _unique_params(model)
    assert line["weight_sync_seconds"] > 0


def test_a_steps_metrics_name_the_bytes_each_transport_carried_for_its_weights(tmp_path, pm, tiny_config):
    import contextlib

    from agentgym_core.rl.rollout_worker import build_rollout_worker

    config = tiny_config(tmp_path, **{"trainer.progress": "false"})
    scheduler = pm.get("round_scheduler", config.algorithm.rounds_ctrl.type)(config.algorithm.rounds_ctrl)
    model, tokenizer = tiny_chat_model(seed=0)
    with contextlib.ExitStack() as stack:
        worker = build_rollout_worker(stack, pm, config, scheduler=scheduler, curriculum=None, model=model,
                                      tokenizer=tokenizer)
        assert not any(k.startswith("weight_sync_bytes_") for k in worker.collect(0).metrics)  # records no syncs
        # A backend that records its syncs, as vLLM's server mode does: one sync in the requests, then a fallback.
        worker.backend.weight_syncs = [{"bytes": 100.0, "transport": "http"}]
        assert worker.collect(1).metrics["weight_sync_bytes_http"] == 100.0
        worker.backend.weight_syncs += [{"bytes": 60.0, "transport": "files"}, {"bytes": 40.0, "transport": "files"}]
        found = {k: v for k, v in worker.collect(2).metrics.items() if k.startswith("weight_sync_bytes_")}
    assert found == {"weight_sync_bytes_files": 100.0}  # each sync counted once, in the step it fed
