"""End to end: GRPO on a tiny random model against an environment served over HTTP on loopback."""

from __future__ import annotations

import json
import os

import pytest
import torch

from agentgym_core.rl.trainer import train


def _tiny():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(seed=0)


def _train_lines(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["kind"] == "train"]


def test_three_step_grpo_run_through_http(tmp_path, pm, tiny_config, monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    model, tokenizer = _tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = tiny_config(tmp_path / "run", **{"algorithm.packing": "true"})  # the packed update path
    result = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)

    lines = _train_lines(tmp_path / "run")
    assert [x["step"] for x in lines] == [1, 2, 3]
    for x in lines:
        assert x["trajectories"] == 6 and x["horizon"] == 2
        assert 1 <= x["turns"] <= 2 and x["sampled_tokens"] > 0
        # Recomputed log-probs match what the backend sampled with (same weights, same tokens).
        assert x["rollout_logprob_gap"] < 1e-3
    assert "eval_before" in result and "eval_after" in result
    assert result["eval_after"]["tasks"] == 2
    assert len(result["eval_after"]["per_task"]) == 2  # per task, for paired comparisons
    # Something trained: with random rewards some group has a non-zero advantage in 3 steps.
    assert any(x["trained_trajectories"] > 0 for x in lines)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    # Saved trajectories carry the per-token advantages they were trained with, zero off the mask.
    saved = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    assert len(saved) == 6
    for record in saved:
        assert len(record["advantages"]) == len(record["token_ids"])
        assert all(a == 0 for a, m in zip(record["advantages"], record["loss_mask"], strict=True) if m == 0)
    # The resolved config and a loadable Hugging Face checkpoint are in the run dir.
    assert "algorithm" in (tmp_path / "run" / "config.yaml").read_text()
    ckpt = tmp_path / "run" / "checkpoints" / "step_000003"
    assert (ckpt / "DONE").exists()
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(ckpt / "model")
    assert torch.allclose(reloaded.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert len(list((tmp_path / "run" / "checkpoints").glob("step_*"))) == 2  # keep_checkpoints
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ  # a CPU run leaves the CUDA allocator's settings alone


def test_resume_after_interruption_repeats_next_step_metrics(tmp_path, pm, tiny_config):
    model, tokenizer = _tiny()
    train(tiny_config(tmp_path / "full", **{"trainer.eval_tasks": 0}), plugin_manager=pm, model=model,
          tokenizer=tokenizer)
    full = _train_lines(tmp_path / "full")

    model, tokenizer = _tiny()
    config = tiny_config(tmp_path / "cut", **{"trainer.eval_tasks": 0})
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer, stop_after=2)
    # A kill during step 3's checkpoint leaves a partial directory: it must be ignored.
    (tmp_path / "cut" / "checkpoints" / "step_000003.tmp" / "model").mkdir(parents=True)
    model, tokenizer = _tiny()  # a fresh process: initial weights, then the checkpoint
    train(config, resume=True, plugin_manager=pm, model=model, tokenizer=tokenizer)
    resumed = _train_lines(tmp_path / "cut")

    assert [x["step"] for x in resumed] == [1, 2, 3]
    for key in ("reward", "success", "turns", "sampled_tokens", "pg_loss", "kl", "entropy", "grad_norm", "horizon"):
        assert resumed[2][key] == pytest.approx(full[2][key], rel=1e-5, abs=1e-7), key


def test_resume_without_checkpoint_explains(tmp_path, pm, tiny_config):
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        train(tiny_config(tmp_path / "none"), resume=True, plugin_manager=pm)
