"""SFT on the tiny model: it learns the expert's replies, checkpoints in the RL layout, resumes exactly."""

from __future__ import annotations

import json

import pytest
import torch

from agentgym_core.finetune.config import FinetuneConfig
from agentgym_core.finetune.data import load_examples
from agentgym_core.finetune.sft import run_sft, sft_loss
from agentgym_core.rl.forward import forward_tokens


def _config(tmp_path, data, **sections):
    base = {"kind": "sft", "data": {"paths": [str(data)]}, "optim": {"lr": 3e-3},
            "sft": {"epochs": 3, "batch_size": 2, "micro_batch_tokens": 512},
            "trainer": {"run_dir": str(tmp_path / "run"), "eval_tasks": 0, "progress": False, "save_every": 2}}
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return FinetuneConfig.model_validate(base)


def _nll(model, examples):
    from agentgym_core.finetune.common import padded_mask

    mask = padded_mask(examples)
    with torch.no_grad():
        lp = forward_tokens(model, [e.token_ids for e in examples], mask).logprobs
    return float(sft_loss(lp, mask))


def test_sft_loss_only_counts_masked_tokens():
    logprobs = torch.tensor([[-5.0, -1.0, -2.0], [-7.0, -3.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    assert float(sft_loss(logprobs, mask)) == pytest.approx((1 + 2 + 3) / 3)
    assert float(sft_loss(logprobs, mask, agg="seq_mean")) == pytest.approx((1.5 + 3) / 2)


def test_environment_tokens_get_no_gradient(tiny, guess_expert_log):
    """Changing only context (environment) tokens' targets leaves the loss unchanged."""
    model, _ = tiny
    example = load_examples(guess_expert_log)[0]
    mask = torch.tensor([example.loss_mask], dtype=torch.float32)
    lp = forward_tokens(model, [example.token_ids], mask).logprobs
    assert bool((lp[mask == 0] == 0).all()) and bool((lp[mask == 1] < 0).all())


def test_sft_learns_the_expert_and_saves_an_rl_checkpoint(tmp_path, tiny, guess_expert_log):
    model, tokenizer = tiny
    examples = load_examples(guess_expert_log)
    before = _nll(model, examples)
    result = run_sft(_config(tmp_path, guess_expert_log), model=model, tokenizer=tokenizer)
    after = _nll(model, examples)
    assert after < before - 0.5, (before, after)
    assert result.steps == 9 and result.checkpoint is not None and result.checkpoint.name == "step_000009"
    assert (result.checkpoint / "DONE").exists() and (result.model_path / "config.json").exists()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(1, 10))
    # The checkpoint loads as a plain HF model (an RL run's model.path) with the trained weights.
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(result.model_path)
    assert _nll(reloaded, examples) == pytest.approx(after, abs=1e-4)


def test_sft_resume_matches_uninterrupted(tmp_path, guess_expert_log):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    full = run_sft(_config(tmp_path / "a", guess_expert_log), model=model, tokenizer=tokenizer)
    cut_cfg = _config(tmp_path / "b", guess_expert_log)
    model_b, tok_b = tiny_chat_model(seed=0)
    run_sft(cut_cfg, model=model_b, tokenizer=tok_b, stop_after=4)  # "killed" after its step-4 checkpoint
    model_c, tok_c = tiny_chat_model(seed=0)  # a fresh process: initial weights, then resume
    resumed = run_sft(cut_cfg, model=model_c, tokenizer=tok_c, resume=True)
    assert resumed.steps == full.steps
    a = [json.loads(x)["loss"] for x in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x)["loss"] for x in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert b == pytest.approx(a, rel=1e-5)
    for p, q in zip(model.parameters(), model_c.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_sft_lora_trains_adapters_only(tmp_path, tiny, guess_expert_log):
    pytest.importorskip("peft")
    from agentgym_core.rl.config import ModelConfig
    from agentgym_core.rl.setup import wrap_lora

    model, tokenizer = tiny
    config = _config(tmp_path, guess_expert_log, model={"lora": {"enabled": True, "r": 4, "alpha": 8,
                                                                 "target_modules": ["q_proj", "v_proj"]}},
                     sft={"epochs": 1})
    lora = wrap_lora(model, ModelConfig.model_validate(config.model.model_dump()))
    base = {k: v.clone() for k, v in lora.state_dict().items() if "lora_" not in k}
    result = run_sft(config, model=lora, tokenizer=tokenizer)
    assert all(torch.equal(v, lora.state_dict()[k]) for k, v in base.items())
    assert (result.checkpoint / "adapter").is_dir() and (result.model_path / "config.json").exists()


def test_warm_start_for_an_rl_recipe(tmp_path, guess_expert_log):
    """An RL TrainConfig plus a warm_start section: SFT runs once, RL gets an HF directory to load."""
    from types import SimpleNamespace

    from agentgym_core.finetune import WarmStartConfig, warm_start_sft
    from agentgym_core.models import resolve_model
    from agentgym_core.rl.config import load_config
    from agentgym_core.testing.tiny_model import tiny_chat_model

    rl = load_config(None, ["envs=[{name: guess}]", f"trainer.run_dir={tmp_path / 'rl'}", "trainer.progress=false"])
    warm = WarmStartConfig.model_validate({"data": {"paths": [str(guess_expert_log)]}, "sft": {"batch_size": 3},
                                           "lr": 1e-3})
    train_config = SimpleNamespace(model=rl.model, trainer=rl.trainer, warm_start=warm)
    model, tokenizer = tiny_chat_model(seed=0)
    path = warm_start_sft(train_config, model=model, tokenizer=tokenizer)
    assert path == tmp_path / "rl" / "warm_start" / "checkpoints" / "step_000004" / "model"
    assert resolve_model(str(path)).directory == path.resolve()  # a valid model.path for the RL run
    assert warm_start_sft(train_config, model=None) == path  # finished: not redone (model=None would load)
