"""The viewer labels what it shows truthfully: a collection is not an evaluation, tokens nothing was
trained on are not "trained", and ids shown instead of text say why."""

from __future__ import annotations

import json
import sys

import httpx
import pytest
from viewer_runs import trajectories, write_log_run, write_metrics, write_trainer_step


def test_a_collect_run_is_labelled_collect(serve_viewer, tmp_path):
    pytest.importorskip("agentgym_env_guess")
    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.config import CollectConfig
    from agentgym_core.plugins import PluginManager
    from agentgym_core.testing.tiny_model import tiny_tokenizer

    out = tmp_path / "collect-guess" / "trajectories.jsonl"
    collect(
        CollectConfig(env="guess", policy="expert", n=2, out=str(out)),
        progress=False,
        plugin_manager=PluginManager(autoload=True, allow=["guess"]),
        tokenizer=tiny_tokenizer(),
    )
    write_log_run(tmp_path / "eval-guess", trajectories(2))
    base = serve_viewer(tmp_path)
    kinds = {r["name"]: r["kind"] for r in httpx.get(f"{base}/api/runs").json()["runs"]}
    assert kinds == {"collect-guess": "collect", "eval-guess": "eval"}
    ov = httpx.get(f"{base}/api/run", params={"run": "collect-guess"}).json()
    assert [s["label"] for s in ov["steps"]] == ["collect"]
    assert ov["config"]["policy"] == "expert" and ov["config"]["n"] == 2
    tv = httpx.get(f"{base}/api/tokens", params={"run": "collect-guess", "step": -1, "i": 0}).json()
    assert tv["trained"] is False and tv["not_trained"] == "nothing is trained in a collection"


def test_tokens_of_a_skipped_update_are_not_trained(serve_viewer, tmp_path):
    write_metrics(tmp_path, 2)
    with (tmp_path / "metrics.jsonl").open("a") as f:  # step 3's update was skipped, step 4's was not
        f.write(json.dumps({"step": 3, "kind": "train", "skipped_update": 1.0}) + "\n")
        f.write(json.dumps({"step": 4, "kind": "train", "skipped_update": 0.0}) + "\n")
    trajs = trajectories(4)
    write_trainer_step(tmp_path, 3, trajs)
    write_trainer_step(tmp_path, 4, trajs)
    base = serve_viewer(tmp_path)
    skipped = httpx.get(f"{base}/api/tokens", params={"step": 3, "i": 0}).json()
    assert skipped["trained"] is False and "update was skipped" in skipped["not_trained"]
    trained = httpx.get(f"{base}/api/tokens", params={"step": 4, "i": 0}).json()
    assert trained["trained"] is True and trained["not_trained"] is None
    write_log_run(tmp_path / "eval", trajs)
    evaluation = httpx.get(f"{base}/api/tokens", params={"run": "eval", "step": -1, "i": 0}).json()
    assert (
        evaluation["trained"] is False and evaluation["not_trained"] == "nothing is trained in an evaluation"
    )


def test_a_tokenizer_that_is_there_but_unreadable_says_which_library_is_missing(tmp_path, monkeypatch):
    from agentgym_core.testing.tiny_model import tiny_tokenizer
    from agentgym_core.viewer.tokens import TokenDecoder

    tiny_tokenizer().save_pretrained(tmp_path)  # tokenizer.json in the run directory
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the library were not installed
    texts, source = TokenDecoder(tmp_path).decode([1, 2])
    decoder = TokenDecoder(tmp_path)
    decoder.decode([1, 2])
    assert texts is None and source is None
    assert decoder.missing.startswith(f"{tmp_path / 'tokenizer.json'} is there, but the `tokenizers` library")
    assert "no tokenizer" not in decoder.missing
    monkeypatch.delitem(sys.modules, "tokenizers")
    (tmp_path / "tokenizer.json").unlink()
    empty = TokenDecoder(tmp_path)
    empty.decode([1])
    assert empty.missing.startswith("no tokenizer.json found")
