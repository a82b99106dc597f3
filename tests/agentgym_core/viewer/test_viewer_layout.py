"""Chart sections derived from metric names, and the run config as flat rows (also through the API)."""

from __future__ import annotations

import json

import httpx
import yaml

from agentgym_core.viewer.layout import chart_sections, flatten_config, metric_section, quiet_keys


def test_each_metric_lands_in_the_section_a_reader_looks_for():
    expected = {
        # What a reader opens the page for comes first, whatever the run logs besides.
        "success": "headline", "reward": "headline", "pg_loss": "headline", "kl_loss": "headline",
        "value_loss": "headline", "my_plugin_loss": "headline",
        "turns": "rollout", "sampled_tokens": "rollout", "invalid_action_rate": "rollout",
        "kl": "loss", "approx_kl": "loss", "clip_frac": "loss",
        "entropy": "loss", "advantage_abs_mean": "loss", "rollout_logprob_gap": "loss",
        "lr": "optimizer", "grad_norm": "optimizer", "optimizer_steps": "optimizer", "update_tokens": "optimizer",
        "time_step": "timing", "update_seconds": "timing", "update_tokens_per_s": "timing",
        "word/success": "word", "babyai/turns": "babyai",
    }
    assert {k: metric_section(k) for k in expected} == expected


def test_sections_cover_every_key_once_in_a_stable_order():
    train = ["step", "time_step", "lr", "reward", "success", "pg_loss", "word/reward", "my_plugin_metric"]
    evaluation = ["step", "success", "reward", "tasks", "word/success"]
    sections = chart_sections(train, evaluation)
    assert [s["section"] for s in sections] == ["headline", "rollout", "optimizer", "timing", "eval", "word"]
    assert sections[0]["keys"] == ["success", "reward", "pg_loss"]  # preferred first, then by name
    assert sections[1]["keys"] == ["my_plugin_metric"]
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
    assert ov["sections"] == [{"section": "headline", "keys": ["success", "reward"]},
                              {"section": "optimizer", "keys": ["grad_norm"]}]
    assert ov["config"] == {"optim.lr": 0.01, "trainer.seed": 3}
    assert httpx.get(f"{base}/api/run", params={"run": "eval"}).json()["config"] == {"env": "word", "n_samples": 2}
    (train / "config.yaml").write_text("optim: [unclosed\n")
    broken = httpx.get(f"{base}/api/run", params={"run": "train"}).json()["config"]
    assert list(broken) == ["(config.yaml)"] and "unreadable YAML" in broken["(config.yaml)"]


def test_charts_that_never_changed_fold_into_one_last_section_but_headlines_stay():
    series = {"train": {"step": [1, 2, 3], "success": [0, 0, 0], "infra_failed": [0, 0, 0], "reruns": [0, 0, 0],
                        "turns": [2, 3, 2], "lr": [0.01, 0.01, 0.01], "word/failed": [0, 0, 0], "once": [None, None, 5]},
              "eval": {"step": [0, 3], "success": [0, 0], "tasks": [2, 2]}}
    quiet = quiet_keys(series)
    assert quiet == {"success", "infra_failed", "reruns", "lr", "word/failed", "tasks"}  # `once`: one value, not 0
    sections = chart_sections(list(series["train"]), list(series["eval"]), quiet)
    assert sections[0] == {"section": "headline", "keys": ["success"]}  # a success stuck at 0 is the news
    assert sections[-1] == {"section": "quiet", "keys": ["infra_failed", "lr", "reruns", "tasks", "word/failed"]}
    assert {"section": "rollout", "keys": ["turns", "once"]} in sections
    assert [s["section"] for s in sections] == ["headline", "rollout", "quiet"]


def test_after_one_step_the_zero_counters_are_quiet_and_the_first_values_are_not():
    series = {"train": {"step": [1], "success": [0.0], "pg_loss": [0.02], "clip_frac": [0.0], "reruns": [0.0],
                        "failed_after_reruns": [0.0], "staleness_mean": [0.0], "turns": [3.0], "lr": [1e-6]}}
    quiet = quiet_keys(series)
    assert quiet == {"success", "clip_frac", "reruns", "failed_after_reruns", "staleness_mean"}
    sections = chart_sections(list(series["train"]), [], quiet)
    assert sections[0] == {"section": "headline", "keys": ["success", "pg_loss"]}
    assert sections[-1] == {"section": "quiet", "keys": ["clip_frac", "failed_after_reruns", "reruns",
                                                         "staleness_mean"]}
    assert {"section": "rollout", "keys": ["turns"]} in sections and {"section": "optimizer", "keys": ["lr"]} in sections
