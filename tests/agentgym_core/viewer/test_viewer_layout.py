"""Chart sections derived from metric names, and the run config as flat rows (also through the API)."""

from __future__ import annotations

import json

import httpx
import yaml

from agentgym_core.viewer.layout import chart_sections, flatten_config, metric_section


def test_each_metric_lands_in_the_section_a_reader_looks_for():
    expected = {
        "success": "rollout", "reward": "rollout", "turns": "rollout", "sampled_tokens": "rollout",
        "pg_loss": "loss", "kl_loss": "loss", "kl": "loss", "approx_kl": "loss", "clip_frac": "loss",
        "entropy": "loss", "advantage_abs_mean": "loss", "rollout_logprob_gap": "loss", "value_loss": "loss",
        "lr": "optimizer", "grad_norm": "optimizer", "optimizer_steps": "optimizer", "update_tokens": "optimizer",
        "time_step": "timing", "update_seconds": "timing", "update_tokens_per_s": "timing",
        "word/success": "word", "babyai/turns": "babyai",
    }
    assert {k: metric_section(k) for k in expected} == expected


def test_sections_cover_every_key_once_in_a_stable_order():
    train = ["step", "time_step", "lr", "reward", "success", "pg_loss", "word/reward", "my_plugin_metric"]
    evaluation = ["step", "success", "reward", "tasks", "word/success"]
    sections = chart_sections(train, evaluation)
    assert [s["section"] for s in sections] == ["rollout", "loss", "optimizer", "timing", "eval", "word"]
    assert sections[0]["keys"] == ["success", "reward", "my_plugin_metric"]  # preferred first, then by name
    charted = [k for s in sections for k in s["keys"]]
    assert sorted(charted) == sorted(set(train + evaluation) - {"step"})  # each once, eval keys of train charts merged
    assert {"section": "eval", "keys": ["tasks"]} in sections
    assert {"section": "word", "keys": ["word/success", "word/reward"]} in sections  # an eval-only key joins its env
    assert chart_sections([], []) == []


def test_flatten_config():
    config = {"optim": {"lr": 0.01, "betas": [0.9, 0.99]}, "envs": [{"name": "word", "weight": 1}], "extra": {}}
    assert flatten_config(config) == {"optim.lr": 0.01, "optim.betas": [0.9, 0.99], "envs.0.name": "word",
                                      "envs.0.weight": 1, "extra": {}}


def test_run_api_serves_sections_and_flat_config(serve_viewer, tmp_path):
    train, evaluation = tmp_path / "train", tmp_path / "eval"
    train.mkdir()
    (train / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "kind": "train", "reward": 0.5, "grad_norm": 1.5, "note": "text is not charted"}) + "\n"
        + json.dumps({"step": 1, "kind": "eval", "success": 0.25}) + "\n")
    (train / "config.yaml").write_text(yaml.safe_dump({"optim": {"lr": 0.01}, "trainer": {"seed": 3}}))
    evaluation.mkdir()
    (evaluation / "results.json").write_text(json.dumps({"config": {"env": "word", "n_samples": 2}}))
    base = serve_viewer(tmp_path)
    ov = httpx.get(f"{base}/api/run", params={"run": "train"}).json()
    assert ov["sections"] == [{"section": "rollout", "keys": ["reward"]}, {"section": "optimizer", "keys": ["grad_norm"]},
                              {"section": "eval", "keys": ["success"]}]
    assert ov["config"] == {"optim.lr": 0.01, "trainer.seed": 3}
    assert httpx.get(f"{base}/api/run", params={"run": "eval"}).json()["config"] == {"env": "word", "n_samples": 2}
    (train / "config.yaml").write_text("optim: [unclosed\n")
    broken = httpx.get(f"{base}/api/run", params={"run": "train"}).json()["config"]
    assert list(broken) == ["(config.yaml)"] and "unreadable YAML" in broken["(config.yaml)"]
