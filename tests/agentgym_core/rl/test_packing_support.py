"""rl.packing_support: the transformers versions whose packed rows attend across sequences are refused, and
packed rows stay apart on the installed one."""

from __future__ import annotations

import pytest
import torch

from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import load_config


def test_packing_support_problem_versions():
    from agentgym_core.rl.packing_support import packing_support_problem

    assert packing_support_problem("4.53.1", "2.6.0") is None
    assert packing_support_problem("5.23.0", "2.13.0+cpu") is None
    assert "4.53.1" in packing_support_problem("4.53.0", "2.7.1")  # the mask builder had no packed detection
    assert "4.53.1" in packing_support_problem("4.45.2", "2.7.1")
    assert "torch >= 2.6" in packing_support_problem("4.54.0", "2.5.1")  # transformers drops the packed mask
    assert "not installed" in packing_support_problem(None, "2.6.0")


def test_config_refuses_packing_on_an_old_transformers(monkeypatch):
    from agentgym_core.rl import packing_support

    real = packing_support.installed_version
    monkeypatch.setattr(packing_support, "installed_version",
                        lambda package: "4.52.4" if package == "transformers" else real(package))
    with pytest.raises(ConfigError, match=r"algorithm.packing=true is unsafe.*4.52.4.*algorithm.packing=false"):
        load_config(None, ["envs=[{name: x}]", "algorithm.packing=true"])
    load_config(None, ["envs=[{name: x}]", "algorithm.packing=false"])  # padded rows are always fine


def test_packed_rows_do_not_attend_across_sequences_on_the_installed_transformers():
    from agentgym_core.rl.forward import forward_tokens, pack_bins
    from agentgym_core.rl.packing_support import installed_version, packing_support_problem
    from agentgym_core.testing.tiny_model import tiny_chat_model

    if packing_support_problem(installed_version("transformers"), installed_version("torch")):
        pytest.skip("the config refuses packing with these versions")
    model, _ = tiny_chat_model(seed=0)
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (10, 5, 5)]
    assert [1, 2] in pack_bins([10, 5, 5], 10)  # the two short sequences share one row
    mask = torch.zeros(3, 10)
    for i, s in enumerate(seqs):
        mask[i, 1: len(s)] = 1
    with torch.no_grad():
        packed = forward_tokens(model, seqs, mask, packing=True, max_tokens=100)
        plain = torch.zeros(3, 10)
        for i, s in enumerate(seqs):
            ids = torch.tensor([s])
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            plain[i, 1: len(s)] = lp
        # Control: the same row with a plain causal mask (what transformers < 4.53.1 built) leaks.
        row = torch.tensor([seqs[1] + seqs[2]])
        pos = torch.tensor([list(range(5)) + list(range(5))])
        leaky = model(input_ids=row, position_ids=pos, attention_mask=torch.ones_like(row), use_cache=False).logits
        leaky_lp = torch.log_softmax(leaky[0, 5:9], -1).gather(-1, row[0, 6:, None]).squeeze(-1)
    assert torch.allclose(packed.logprobs, plain, atol=1e-5)
    assert not torch.allclose(leaky_lp, plain[2, 1:5], atol=1e-3), "control: cross-sequence attention must show"
