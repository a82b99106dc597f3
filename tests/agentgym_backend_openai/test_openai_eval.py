"""`agentgym eval --backend openai` against a real OpenAI-compatible server and a real env."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from openai_test_support import SERVED_NAME

from agentgym_core.evaluation import EvalConfig, evaluate
from agentgym_core.rollout.logs import read_rollout_log
from agentgym_core.testing import serve_env

GuessEnv = pytest.importorskip("agentgym_env_guess").GuessEnv


def _config(tmp_path, base_url, **extra):
    fields = dict(env="guess", backend="openai", model=SERVED_NAME, base_url=base_url, split="test", limit=3,
                  n_samples=2, temperature=1.0, max_new_tokens=8, max_rounds=3, num_envs=4,
                  out_dir=str(tmp_path / "run"))
    return EvalConfig(**(fields | extra))


def _replay(record):
    """Play the logged actions in a fresh env: the logged observations must be the env's answers."""
    env = GuessEnv()
    env.reset(record["task_id"])
    for turn in record["turns"]:
        result = env.step(turn["action"])
        assert turn["observation"] == result.observation
        assert turn["reward"] == result.reward


def test_eval_writes_results_and_a_text_only_log(api_url, tmp_path):
    from agentgym_backend_openai import make_backend

    config = _config(tmp_path, api_url, api_key="sk-secret-not-saved")
    backend = make_backend({"model": SERVED_NAME, "base_url": api_url})
    results = evaluate(config, backend=backend, make_env=GuessEnv, progress=False)
    assert results.overall.tasks == 3 and results.overall.samples == 6 and results.overall.failed == 0
    assert results.trainable is False and set(results.categories) == {"even", "odd"}
    assert results.timing["sampled_tokens"] > 0
    saved = (tmp_path / "run" / "results.json").read_text()
    assert "sk-secret-not-saved" not in saved and json.loads(saved)["trainable"] is False
    records = list(read_rollout_log(tmp_path / "run" / "trajectories.jsonl"))
    assert sorted((r["task_id"], r["sample_index"]) for r in records) == [(t, s) for t in (900, 901, 902) for s in (0, 1)]
    for record in records:
        assert record["trainable"] is False and "tokens" not in record
        assert record["mask"] == {"total": 0, "sampled": 0, "context": 0}
        assert 1 <= record["num_turns"] <= 3 and not record["failed"]
        assert record["truncation_reason"] == "max_turns" or record["terminated"]
        roles = [m["role"] for m in record["messages"]]
        assert roles == ["system", "user"] + ["assistant", "user"] * record["num_turns"]
        for turn, reply in zip(record["turns"], record["messages"][2::2], strict=True):
            assert turn["text"] == reply["content"]
            assert 1 <= turn["usage"]["completion_tokens"] <= 8
        assert record["usage"]["completion_tokens"] == sum(t["usage"]["completion_tokens"] for t in record["turns"])
        _replay(record)


def test_eval_against_an_env_server(api_url, tmp_path):
    from agentgym_backend_openai import make_backend
    from agentgym_backend_openai.backend import normalize_base_url

    backend = make_backend({"model": SERVED_NAME, "base_url": api_url})
    with serve_env(GuessEnv) as env_url:
        config = _config(tmp_path, api_url, env_url=env_url, n_samples=1, limit=2)
        results = evaluate(config, backend=backend, progress=False)
    assert results.overall.samples == 2 and results.overall.failed == 0
    for record in read_rollout_log(tmp_path / "run" / "trajectories.jsonl"):
        _replay(record)
    # what sampled the episodes, as far as a client can say (issue 46): a remote server, and which one
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["sampling_setup"] == {"device": "remote", "decode_engine": "openai-compatible server",
                                       "server": f"{normalize_base_url(api_url)} (model {SERVED_NAME})"}


def test_server_down_is_recorded_per_trajectory(dead_url, tmp_path):
    from agentgym_backend_openai import make_backend

    backend = make_backend({"model": SERVED_NAME, "base_url": dead_url, "max_retries": 0})
    results = evaluate(_config(tmp_path, dead_url), backend=backend, make_env=GuessEnv, progress=False)
    assert results.overall.samples == 6 and results.overall.failed == 6
    assert results.failure_reasons == {"model_error": 6}
    for record in read_rollout_log(tmp_path / "run" / "trajectories.jsonl"):
        assert record["failed"] and "cannot connect" in record["failure_reason"]
        assert record["num_turns"] == 0 and record["messages"][0]["role"] == "system"


def _cli(*args, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    env["AGENTGYM_PLUGINS"] = "guess,openai"
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "agentgym_core.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def _eval_args(tmp_path, base_url, *extra):
    return ["eval", "--env", "guess", "--backend", "openai", "--base-url", base_url, "--model", SERVED_NAME,
            "--limit", "2", "--max-rounds", "2", "--max-new-tokens", "6", "--num-envs", "2",
            "--out", str(tmp_path / "cli"), *extra]


def test_eval_command_end_to_end(api_url, tmp_path):
    done = _cli(*_eval_args(tmp_path, api_url.removesuffix("/v1")))  # a bare host:port works too
    assert done.returncode == 0, done.stderr
    assert "ALL" in done.stdout and "success Avg@1" in done.stdout and "evaluation only" in done.stdout
    results = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert results["overall"]["samples"] == 2 and results["config"]["backend"] == "openai"
    assert len((tmp_path / "cli" / "trajectories.jsonl").read_text().splitlines()) == 2


def test_eval_command_errors(api_url, dead_url, tmp_path):
    args = _eval_args(tmp_path, api_url)
    args[args.index("--model") + 1] = "no-such-model"
    unknown = _cli(*args)
    assert unknown.returncode == 2
    assert "does not serve model 'no-such-model'" in unknown.stderr and SERVED_NAME in unknown.stderr
    down = _cli(*_eval_args(tmp_path, dead_url), "--request-timeout", "5")
    assert down.returncode == 1  # nothing measured
    assert "model_error: 2" in down.stdout and "is the server running" in down.stdout


def test_backend_gets_only_the_options_the_user_set(api_url, tmp_path):
    from agentgym_core.evaluation.run import backend_options

    options = backend_options(_config(tmp_path, api_url, request_timeout_s=7.0))
    assert options == {"model": SERVED_NAME, "base_url": api_url, "timeout_s": 7.0}
    assert backend_options(_config(tmp_path, api_url, device="cuda"))["device"] == "cuda"  # refused by the factory


def test_constrained_actions_are_refused_for_an_api_that_returns_text(tmp_path):
    """`agentgym eval --constrain-actions --backend openai`: no reply token can be masked, so it stops before any
    request (the address answers nothing) with what to do instead."""
    from agentgym_backend_openai import make_backend

    dead = "http://127.0.0.1:9/v1"
    backend = make_backend({"model": SERVED_NAME, "base_url": dead})
    with pytest.raises(ValueError, match="constrain_actions needs a local backend.*--backend transformers"):
        evaluate(_config(tmp_path, dead, constrain_actions=True), backend=backend, make_env=GuessEnv, progress=False)
