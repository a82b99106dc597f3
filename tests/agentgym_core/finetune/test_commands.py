"""`agentgym collect` and `agentgym finetune` from the command line (in-process, real files)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from agentgym_core.commands import collect as collect_cmd
from agentgym_core.commands import finetune as finetune_cmd

sys.path.insert(0, str(Path(__file__).parent))


def _parse(module, argv):
    parser = argparse.ArgumentParser()
    module.add_parser(parser.add_subparsers())
    return parser.parse_args(argv)


def test_collect_expert_cli_writes_a_rollout_log(tmp_path, capsys, monkeypatch, pm, tiny):
    import agentgym_core.finetune.collect as collect_mod

    monkeypatch.setattr(collect_mod, "get_plugin_manager", lambda: pm)
    monkeypatch.setattr(collect_mod, "load_tokenizer", lambda spec: tiny[1])  # the tiny model's template
    out = tmp_path / "guess.jsonl"
    args = _parse(collect_cmd, ["collect", "--env", "guess", "--n", "3", "--split", "test", "--out", str(out)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "wrote 3 trajectories" in printed and "3 successful (100.0%)" in printed
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["task_id"] for r in records] == [900, 901, 902]
    assert all(r["format"] == "agentgym.trajectory/1" and r["success"] and r["tokens"]["token_ids"] for r in records)


def test_collect_without_an_expert_says_how_to_add_one(monkeypatch, capsys, pm):
    from letter_env import LetterPlugin

    import agentgym_core.finetune.collect as collect_mod

    pm.register(LetterPlugin(), "letter-test")
    monkeypatch.setattr(collect_mod, "get_plugin_manager", lambda: pm)
    args = _parse(collect_cmd, ["collect", "--env", "letter", "--n", "1"])
    assert args.func(args) == 2
    assert "def agentgym_register_experts(register)" in capsys.readouterr().err


def test_finetune_cli_rejects_unknown_keys(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("kind: sft\ndata: {paths: [x.jsonl]}\nsft: {epoch: 2}\n")
    args = _parse(finetune_cmd, ["finetune", str(recipe)])
    assert args.func(args) == 2
    assert "Did you mean 'sft.epochs'" in capsys.readouterr().err
    recipe.write_text("kind: dpo\n")
    args = _parse(finetune_cmd, ["finetune", str(recipe)])
    assert args.func(args) == 2
    assert "needs data.paths" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["babyai_sft_cpu", "babyai_dpo_cpu", "babyai_rejection_sampling_cpu"])
def test_example_recipes_validate(name):
    from agentgym_core.finetune.config import load_finetune_config

    root = Path(__file__).parents[3]
    config = load_finetune_config(root / "examples" / f"{name}.yaml")
    assert config.kind in name
