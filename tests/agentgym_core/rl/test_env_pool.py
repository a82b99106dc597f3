"""Environment pools and several environments in one run, against real servers on loopback.

Servers are in-process ``serve_env`` servers (stopping one closes its port, as a dead process
would); the trainer runs use the tiny random model. The kill of a separate ``agentgym serve``
process mid-run is in ``tests/reliability/test_env_pool_kill.py``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest
import requests
from word_env import WordEnv

from agentgym_core import hookimpl
from agentgym_core.env import StepResult, TaskCatalog
from agentgym_core.http.client import ServerUnreachableError
from agentgym_core.http.pool import EnvPool, NoHealthyServerError
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import load_config
from agentgym_core.rl.trainer import train
from agentgym_core.testing import serve_env


def live_instances(url: str) -> int:
    return requests.get(f"{url}/v1/health", timeout=5).json()["live_instances"]


# ---- the pool on its own ---------------------------------------------------------------------------------
def test_new_instances_go_to_the_least_loaded_server_and_leave_a_dead_one():
    with serve_env(WordEnv) as a, serve_env(WordEnv) as b, contextlib.ExitStack() as stack:
        c_context = serve_env(WordEnv)
        c = c_context.__enter__()
        stack.callback(lambda: c_context.__exit__(None, None, None))
        pool = EnvPool([a, b, c], env="word", timeout=5, probe_interval_s=60)
        stack.callback(pool.close)
        assert pool.check().splits["train"] == list(range(16))

        envs = [pool.make_env() for _ in range(6)]
        for i, env in enumerate(envs):
            env.reset(i)
        assert [live_instances(u) for u in (a, b, c)] == [2, 2, 2]
        envs[0].close()
        envs[1].close()  # one off a, one off b (placement went round-robin): a and b now hold 1, c holds 2
        fresh = pool.make_env()
        fresh.reset(7)
        fresh2 = pool.make_env()
        fresh2.reset(8)
        assert sorted(live_instances(u) for u in (a, b, c)) == [2, 2, 2]

        on_c = [env for env in envs[2:] + [fresh, fresh2] if env.client.base_url == c]
        assert len(on_c) == 2
        c_context.__exit__(None, None, None)
        stack.pop_all()

        # Mid-episode on the dead server: the step raises (the episode is lost), the server is marked down.
        with pytest.raises(ServerUnreachableError):
            on_c[0].step("Action: red")
        counts = {s.url: s for s in pool.snapshot()}
        assert counts[c].down and counts[c].errors == 1 and counts[c].live == 1
        # A reset moves to a live server: the episode has not started, nothing is lost.
        result = on_c[1].reset(3)
        assert result.observation and on_c[1].client.base_url in (a, b)
        assert pool.snapshot()[2].live == 0
        # New instances avoid the dead server.
        for k in range(4):
            env = pool.make_env()
            env.reset(k)
            assert env.client.base_url in (a, b)
        assert sum(s.steps for s in pool.snapshot()) == 0  # the failed step was not counted as answered


def test_a_server_marked_down_is_probed_again_and_comes_back():
    with serve_env(WordEnv) as a, serve_env(WordEnv) as b:
        pool = EnvPool([a, b], env="word", timeout=5, probe_interval_s=0.2)
        pool.check()
        pool.record_unreachable(pool.clients[1])  # as a timed-out call would
        env = pool.make_env()
        env.reset(0)
        assert env.client.base_url == a  # b is down and not yet due for a probe
        time.sleep(0.3)
        env2 = pool.make_env()
        env2.reset(1)  # the probe finds b answering again; it is the less loaded one
        assert env2.client.base_url == b and not pool.snapshot()[1].down
        pool.close()


def test_all_servers_down_fails_with_every_url_named():
    with serve_env(WordEnv) as a:
        pool = EnvPool([a], env="word", timeout=2, probe_interval_s=60)
        pool.check()
        env = pool.make_env()
        env.reset(0)
    with pytest.raises(NoHealthyServerError, match=a.replace(".", r"\.")):
        env.reset(1)
    with pytest.raises(NoHealthyServerError, match="none of the 1 servers of 'word' answered"):
        EnvPool([a], env="word", timeout=2).check()


class OtherWordEnv(WordEnv):
    name = "other"


class SmallWordEnv(WordEnv):
    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits={"train": [0, 1], "test": [2]})


def test_a_server_of_another_env_or_catalog_is_a_configuration_error():
    with serve_env(WordEnv) as a, serve_env(OtherWordEnv) as other, serve_env(SmallWordEnv) as small:
        with pytest.raises(ValueError, match=f"the server at {other} serves 'other', not 'word'"):
            EnvPool([a, other], env="word").check()
        with pytest.raises(ValueError, match="different task catalogs"):
            EnvPool([a, small], env="word").check()
    with pytest.raises(ValueError, match="twice"):
        EnvPool(["http://127.0.0.1:1", "http://127.0.0.1:1/"], env="word")


def test_config_takes_urls_and_explains_bad_ones():
    config = load_config(None, ["envs=[{name: word, urls: ['http://127.0.0.1:1', 'http://127.0.0.1:2']}]"])
    assert config.envs[0].server_urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert load_config(None, ["envs=[{name: word, url: 'http://h:1'}]"]).envs[0].server_urls == ["http://h:1"]
    assert load_config(None, ["envs=[{name: word}]"]).envs[0].server_urls == []
    with pytest.raises(ConfigError, match="sets both url and urls"):
        load_config(None, ["envs=[{name: word, url: 'http://h:1', urls: ['http://h:2']}]"])
    with pytest.raises(ConfigError, match="urls is empty"):
        load_config(None, ["envs=[{name: word, urls: []}]"])
    with pytest.raises(ConfigError, match="more than once"):
        load_config(None, ["envs=[{name: word, urls: ['http://h:1', 'http://h:1/']}]"])
    with pytest.raises(ConfigError, match="Did you mean 'envs\\[0\\].urls'"):
        load_config(None, ["envs=[{name: word, url_list: ['http://h:1']}]"])


# ---- several environments, pools and re-runs in a training run ---------------------------------------
CALLS: list[tuple[str, str, float]] = []  # (env, call, time) of every reset and step, across servers
CALLS_LOCK = threading.Lock()


class TimedWordEnv(WordEnv):
    """WordEnv that records when its resets and steps happen, and takes a moment per step."""

    name = "timed_word"

    def reset(self, task_id, seed=None):
        with CALLS_LOCK:
            CALLS.append((self.name, "reset", time.monotonic()))
        return super().reset(task_id, seed)

    def step(self, action):
        time.sleep(0.02)
        with CALLS_LOCK:
            CALLS.append((self.name, "step", time.monotonic()))
        return super().step(action)


class TimedColourEnv(TimedWordEnv):
    name = "timed_colour"


FLAKY_SEEN: set[int] = set()


class FlakyWordEnv(WordEnv):
    """WordEnv whose first step of each task fails with an environment error (each task once, process-wide)."""

    name = "flaky_word"

    def step(self, action: str) -> StepResult:
        if self.target and self._task not in FLAKY_SEEN:
            FLAKY_SEEN.add(self._task)
            raise RuntimeError(f"flaky failure on task {self._task}")
        return super().step(action)

    def reset(self, task_id, seed=None):
        self._task = task_id
        return super().reset(task_id, seed)


class PoolTestPlugin:
    @hookimpl
    def agentgym_register_envs(self, register) -> None:
        register("timed_word", TimedWordEnv, summary="test env")
        register("timed_colour", TimedColourEnv, summary="test env")
        register("flaky_word", FlakyWordEnv, summary="test env")


@pytest.fixture
def pool_pm(pm):
    pm.register(PoolTestPlugin(), "pool-test")
    return pm


def _run_config(run_dir, envs, **overrides):
    base = [
        f"envs={json.dumps(envs)}",
        f"trainer.run_dir={run_dir}", "trainer.steps=1", "trainer.eval_tasks=0", "trainer.eval_before=false",
        "trainer.progress=false", "trainer.tensorboard=false",
        "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
        "rollout.max_total_tokens=256", "algorithm.rounds_ctrl.rounds=2",
    ]
    return load_config(None, base + [f"{k}={v}" for k, v in overrides.items()])


def _tiny():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(seed=0)


def test_two_envs_sample_concurrently_one_of_them_over_a_pool(tmp_path, pool_pm):
    CALLS.clear()
    model, tokenizer = _tiny()
    with serve_env(TimedWordEnv) as a, serve_env(TimedWordEnv) as b:
        config = _run_config(tmp_path / "run", [{"name": "timed_word", "urls": [a, b], "max_concurrency": 4},
                                                {"name": "timed_colour", "max_concurrency": 4}],
                             **{"rollout.tasks_per_step": 4, "trainer.eval_tasks": 2})
        result = train(config, plugin_manager=pool_pm, model=model, tokenizer=tokenizer)
        assert live_instances(a) == 0 and live_instances(b) == 0  # the run closed its instances
    metrics = result["final"]
    # Each env has its own figures; both envs' episodes were in flight together, not one env after the other.
    assert {"timed_word/success", "timed_colour/success", "timed_word/failed", "timed_colour/failed"} <= set(metrics)
    first_colour_reset = min(t for env, call, t in CALLS if env == "timed_colour" and call == "reset")
    last_word_step = max(t for env, call, t in CALLS if env == "timed_word" and call == "step")
    assert first_colour_reset < last_word_step
    # Per-server figures of the pool: its 4 episodes' instances were spread over both servers.
    assert metrics["pool/timed_word/s0/instances"] == 2 and metrics["pool/timed_word/s1/instances"] == 2
    assert metrics["pool/timed_word/s0/steps_per_s"] > 0 and metrics["pool/timed_word/s1/steps_per_s"] > 0
    assert metrics["pool/timed_word/s0/errors"] == 0 and metrics["pool/timed_word/s0/down"] == 0
    assert metrics["trajectories"] == 8 and metrics["infra_failed"] == 0 and metrics["reruns"] == 0
    # The held-out evaluation plays both envs too (in one engine), each with its own figures.
    evaluation = result["eval_after"]
    assert evaluation["tasks"] == 4 and {"timed_word/success", "timed_colour/success"} <= set(evaluation)


@pytest.mark.parametrize("reruns", [1, 0])
def test_broken_trajectories_are_counted_and_rerun_never_dropped(tmp_path, pool_pm, reruns):
    FLAKY_SEEN.clear()
    model, tokenizer = _tiny()
    config = _run_config(tmp_path / "run", [{"name": "flaky_word", "max_concurrency": 2}],
                         **{"rollout.rerun_failed": reruns, "rollout.group_size": 1,
                            "algorithm.estimator": "reinforce_pp",
                            "rollout.max_env_failure_rate": 1.0})  # without re-runs every episode is lost: counted
    metrics = train(config, plugin_manager=pool_pm, model=model, tokenizer=tokenizer)["final"]
    saved = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "step_000001.jsonl").read_text().splitlines()]
    failed = [t for t in saved if t["failed"]]
    # Both tasks' first attempts broke (env error on their first step): counted, kept in the saved step.
    assert len(failed) == 2 and all("flaky failure" in t["failure_reason"] for t in failed)
    assert metrics["infra_failed"] == 2 and metrics["failed"] == 2
    if reruns:
        assert metrics["reruns"] == 2 and metrics["failed_after_reruns"] == 0
        assert metrics["trajectories"] == 4 and metrics["trained_trajectories"] == 2
        assert sorted(t["task_id"] for t in saved if not t["failed"]) == sorted(t["task_id"] for t in failed)
    else:
        assert metrics["reruns"] == 0 and metrics["failed_after_reruns"] == 2
        assert metrics["trajectories"] == 2 and metrics["trained_trajectories"] == 0



# ---- the engine's multi-environment form ---------------------------------------------------------------
def test_one_engine_plays_named_envs_and_refuses_unknown_names():
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.rollout import EngineConfig, EnvSource, EpisodeSpec, RolloutEngine
    from agentgym_core.rollout.text_engine import TextRolloutEngine

    backend = TransformersBackend(*_tiny())
    sources = {"word": EnvSource(WordEnv, 2), "other": EnvSource(OtherWordEnv, 1)}
    episodes = [EpisodeSpec(task_id=t, env=e) for e in ("word", "other") for t in (0, 1, 2)]
    with RolloutEngine(backend, sources, config=EngineConfig(max_turns=2, sampling={"max_new_tokens": 4})) as engine:
        trajectories = engine.run(episodes)
        assert [(t.env, t.task_id) for t in trajectories] == [(s.env, s.task_id) for s in episodes]
        assert not any(t.failed for t in trajectories) and all(t.num_turns >= 1 for t in trajectories)
        with pytest.raises(ValueError, match=r"EpisodeSpec.env='wrod' is not one of this engine's environments "
                                             r"\(word, other\)"):
            engine.run([EpisodeSpec(task_id=0, env="wrod")])
    with pytest.raises(ValueError, match="no env_name"):
        RolloutEngine(backend, sources, env_name="word")
    with pytest.raises(ValueError, match="the text engine plays one environment"):
        TextRolloutEngine(backend, sources)
