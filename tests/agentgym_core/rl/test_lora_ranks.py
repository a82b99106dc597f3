"""LoRA on two FSDP2 learner ranks (gloo, strict collectives): the update of one process, and only the
adapters travel to each rank's rollout copy after every update."""

from __future__ import annotations

import pytest
import torch
from learner_ranks import RANKS_LR, final_weights, run, run_ranks, train_lines

LORA = ["model.lora.enabled=true", "model.lora.r=4", "model.lora.target_modules=[q_proj, v_proj]",
        "algorithm.packing=false"]


@pytest.mark.slow
def test_lora_on_two_ranks_trains_what_one_process_trains_and_syncs_only_the_adapters(tmp_path):
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.policy import wrap_lora
    from agentgym_core.testing.tiny_model import tiny_chat_model

    run_ranks(2, str(tmp_path / "ranks"), [*LORA, *RANKS_LR])
    run(str(tmp_path / "one"), [*LORA, *RANKS_LR])
    ranks, one = train_lines(tmp_path / "ranks"), train_lines(tmp_path / "one")
    assert len(ranks) == len(one) == 2
    for a, b in zip(ranks, one, strict=True):
        for key in ("pg_loss", "kl", "grad_norm", "sampled_tokens"):
            assert a[key] == pytest.approx(b[key], abs=1e-5), (key, a[key], b[key])
    assert ranks[1]["kl"] > 0  # the adapters moved the policy away from the reference (adapters off)

    model, _ = tiny_chat_model(seed=0)
    whole = sum(p.numel() * p.element_size() for p in model.parameters())
    config = load_config(None, ["envs=[{name: word}]", *LORA])
    adapters = sum(p.numel() * p.element_size() for n, p in wrap_lora(model, config.model).named_parameters()
                   if ".lora_" in n)
    for line in ranks:  # each rank's rollout copy received the adapters only, and then scored as its learner
        assert line["weight_sync_bytes"] == adapters < whole / 10
        assert line["weight_sync_gap"] < 1e-5
    theirs, ours = final_weights(tmp_path / "one", 2), final_weights(tmp_path / "ranks", 2)  # merged adapters
    assert all(torch.allclose(ours[k], theirs[k], atol=1e-5) for k in theirs)
