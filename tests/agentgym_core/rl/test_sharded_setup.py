"""Set-up of sharded learner ranks: only rank 0 reads the weights (into host memory); the others build
the model's structure on the meta device, and every rank ends with its shards of the same weights."""

from __future__ import annotations

import pytest
import torch
from setup_ranks import build_in_rank

from agentgym_core.rl.distributed import spawn
from agentgym_core.testing.tiny_model import tiny_chat_model


@pytest.mark.slow
def test_only_rank_0_reads_the_weights_and_no_rank_copies_them_before_sharding(tmp_path):
    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    spawn(build_in_rank, 2, str(tmp_path / "tiny"), str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert ranks[0]["reads"] == ["cpu"] and ranks[1]["reads"] == []  # one full copy, in rank 0's host memory
    assert ranks[1]["devices_before_sharding"] == ["meta"]  # structure only: nothing allocated
    expected = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    for name in ("policy", "reference"):  # the reference: built from the same broadcast, never deep-copied
        got = ranks[0][name]
        assert got.keys() >= expected.keys(), name
        for k, v in expected.items():
            torch.testing.assert_close(got[k], v, atol=0, rtol=0), (name, k)
    for r in range(2):  # buffers no state dict holds reach every rank too
        for k, v in dict(model.named_buffers()).items():
            if "inv_freq" in k:
                torch.testing.assert_close(ranks[r]["rotary"][k], v, atol=0, rtol=0)
