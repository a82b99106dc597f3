"""One GRPO step whose multi-turn rollouts run on the transformers backend's library decode engine."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from agentgym_core.rl.trainer import train


def test_one_grpo_step_on_the_library_decode_engine(tmp_path, pm, tiny_config, caplog):
    from agentgym_backend_transformers.library_engine import library_engine_available
    from agentgym_core.testing.tiny_model import tiny_chat_model

    if not library_engine_available():
        pytest.skip("transformers without continuous batching")
    model, tokenizer = tiny_chat_model(seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = tiny_config(tmp_path / "run", **{"trainer.steps": 1, "trainer.eval_tasks": 0,
                                              "rollout.backend_options": "{decode_engine: library}"})
    with caplog.at_level(logging.INFO, logger="agentgym_backend_transformers"):
        train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    assert "decode engine library" in caplog.text and "continuous-batching manager ready" in caplog.text
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = [x for x in lines if x["kind"] == "train"]
    assert [x["step"] for x in step] == [1]
    assert step[0]["trajectories"] == 6 and step[0]["sampled_tokens"] > 0 and step[0]["turns"] > 1
    assert step[0]["rollout_logprob_gap"] < 1e-3  # the library engine's log-probs are the learner's
    assert any((before[k] - v).abs().sum() > 0 for k, v in model.state_dict().items())  # the step trained
    # The run closed its backend: the library engine's thread, which holds cuDNN attention's process-wide
    # flag off while it runs, has stopped and handed the flag back.
    assert torch.backends.cuda.cudnn_sdp_enabled()
