"""Loud failures (agentgym_core.rl.guards): the environment failure budget, the check after every weight sync,
and the fixed evaluation panels, each on a real run of the trainer (tiny model, envs served on loopback)."""

from __future__ import annotations

import json

import pytest
from word_env import WordEnv

from agentgym_core import hookimpl
from agentgym_core.evaluation.panel import evaluation_panel, panel_hash
from agentgym_core.rl.guards import EnvFailureBudgetExceeded, WeightSyncError, check_env_failures
from agentgym_core.rl.trainer import train
from agentgym_core.rollout.trajectory import Trajectory


def _tiny():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(seed=0)


# ---- the environment failure budget ----------------------------------------------------------------------
class CrashEnv(WordEnv):
    """The word game, but its simulator dies on every step (a real env raising inside a real server)."""

    name = "crash"

    def step(self, action: str):
        raise RuntimeError("the simulator crashed")


class CrashPlugin:
    @hookimpl
    def agentgym_register_envs(self, register) -> None:
        register("crash", CrashEnv, summary="test env that crashes on every step")


def test_a_crashing_env_server_stops_the_run_with_one_line_naming_env_server_and_error(tmp_path, pm, tiny_config):
    pm.register(CrashPlugin(), "crash-test")
    model, tokenizer = _tiny()
    config = tiny_config(tmp_path / "run", **{"envs": "[{name: crash, max_concurrency: 1}]", "trainer.eval_tasks": 0})
    with pytest.raises(EnvFailureBudgetExceeded) as caught:
        train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("step 0: 6 of 6 episodes broke by env errors or timeouts in every attempt")
    assert "env 'crash'" in message and "server http://127.0.0.1:" in message
    assert "the simulator crashed" in message and "rollout.max_env_failure_rate=0.5" in message


def _attempt(failed: bool, task_id: int = 0) -> Trajectory:
    return Trajectory(env="word", task_id=task_id, failed=failed, failed_server="http://127.0.0.1:1" if failed else None,
                      failure_reason="env_error: step raised RemoteError: boom\ntraceback..." if failed else None)


def test_the_budget_counts_episodes_lost_in_every_attempt_up_to_the_rate():
    check_env_failures([_attempt(True, 0), _attempt(False, 1)], 0.5, step=3)  # half the episodes: within
    check_env_failures([_attempt(True, 0), _attempt(True, 1), _attempt(False, 1)], 0.5, step=3)  # a re-run saved 1
    with pytest.raises(EnvFailureBudgetExceeded, match=r"^step 3: 2 of 3 episodes .* server http://127.0.0.1:1 "
                                                        r"\(3 failed attempts\): env_error: step raised RemoteError: boom$"):
        check_env_failures([_attempt(True, 0), _attempt(True, 1), _attempt(False, 2), _attempt(True, 1)], 0.5, step=3)
    check_env_failures([_attempt(True, t) for t in range(3)], 1.0, step=0)  # 1 never stops


# ---- the check after every weight sync ------------------------------------------------------------------
def test_a_sync_that_does_not_change_the_backends_weights_stops_the_run(tmp_path, pm, tiny_config, monkeypatch):
    from agentgym_backend_transformers import TransformersBackend

    # The fault: load_weights returns without loading (the real backend, its real copy of the model).
    monkeypatch.setattr(TransformersBackend, "load_weights", lambda self, state_dict: None)
    model, tokenizer = _tiny()
    # max_staleness 1: the rollout side samples from its own copy, which only a weight sync updates.
    config = tiny_config(tmp_path / "run", **{"rollout.max_staleness": 1, "trainer.eval_tasks": 0})
    with pytest.raises(WeightSyncError, match="did not load the weights it was sent|does not hold the weights"):
        train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)


def test_working_syncs_pass_the_check_and_evaluations_log_their_panel(tmp_path, pm, tiny_config):
    model, tokenizer = _tiny()
    config = tiny_config(tmp_path / "run", **{"rollout.max_staleness": 1, "rollout.sync_check_tolerance": 1e-4})
    train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    panel = json.loads((tmp_path / "run" / "evaluation_panel.json").read_text())
    assert panel["panel_tasks"] == {"word": [16, 17]}
    assert panel["conditions"]["horizon"] == 2 and panel["conditions"]["temperature"] == 0.0
    assert panel["panel_hash"] == panel_hash({"word": [16, 17]}, panel["conditions"])
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if x["kind"] == "eval"]
    assert len(evals) == 2 and {x["panel_hash"] for x in evals} == {panel["panel_hash"]}


# ---- fixed evaluation panels ------------------------------------------------------------------------------
def test_the_panel_is_the_same_with_one_server_or_two(pm):
    from agentgym_core.rl.config import EnvConfig
    from agentgym_core.rl.envs import open_envs
    from agentgym_core.testing.serving import serve_env

    with serve_env(WordEnv) as a, serve_env(WordEnv) as b:
        with open_envs(pm, [EnvConfig(name="word", url=a, max_concurrency=1)]) as one:
            first = evaluation_panel(one, 3)
        with open_envs(pm, [EnvConfig(name="word", urls=[a, b], max_concurrency=4)]) as two:
            second = evaluation_panel(two, 3)
    assert first == second == {"word": [16, 17, 18]}
    assert panel_hash(first) == panel_hash(second)
    assert panel_hash({"a": [1], "b": [2]}) == panel_hash({"b": [2], "a": [1]})
    assert panel_hash({"a": [1, 2]}) != panel_hash({"a": [2, 1]})


def test_agentgym_eval_logs_the_same_panel_with_one_worker_or_two(tmp_path):
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.evaluation import EvalConfig, evaluate

    backend = TransformersBackend(*_tiny())
    hashes = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        config = EvalConfig(env="word", limit=2, max_rounds=1, max_new_tokens=4, num_envs=workers, out_dir=str(out))
        results = evaluate(config, backend=backend, make_env=WordEnv, progress=False)
        assert json.loads((out / "evaluation_panel.json").read_text())["panel_tasks"] == {"word": [16, 17]}
        hashes.append(results.panel_hash)
    # ... and the same tasks under other conditions have another hash.
    assert hashes[0] == hashes[1]
    other = evaluate(EvalConfig(env="word", limit=2, max_rounds=1, max_new_tokens=5, out_dir=str(tmp_path / "other")),
                     backend=backend, make_env=WordEnv, progress=False)
    assert other.panel_hash != hashes[0]
