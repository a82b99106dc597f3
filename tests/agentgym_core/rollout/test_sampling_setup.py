"""What sampling runs on, said once for several engines (issue 46: every backend's rollout/* keys)."""

from __future__ import annotations

from agentgym_core.rollout.backend import merge_sampling_setups


def test_a_value_every_engine_shares_is_said_once():
    one = {"device": "cuda:0", "dtype": "bfloat16", "attention_kernel": "FLASH_ATTN"}
    assert merge_sampling_setups([one, dict(one)]) == one
    assert merge_sampling_setups([one]) == one
    assert merge_sampling_setups([]) == {}


def test_a_value_they_differ_on_names_each_engine_and_a_missing_one_counts_as_a_dash():
    merged = merge_sampling_setups([{"device": "cuda:0", "attention_kernel": "FLASH_ATTN"},
                                    {"device": "cpu", "attention_kernel": "FLASH_ATTN", "dtype": "float32"}],
                                   engine="replica")
    assert merged == {"device": "cuda:0 (replica 0), cpu (replica 1)", "attention_kernel": "FLASH_ATTN",
                      "dtype": "- (replica 0), float32 (replica 1)"}
