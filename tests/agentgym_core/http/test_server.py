"""The generated environment server: protocol, errors, concurrency, capacity, TTL, compat."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from agentgym_core.env import EpisodeEndedError, InvalidTaskError
from agentgym_core.http.client import EnvClient, HTTPEnv, RemoteError
from agentgym_core.http.compat import AgentGymCompat
from agentgym_core.testing import check_env_http, serve_env
from agentgym_env_guess import GuessEnv
from agentgym_env_guess.env import solve


class CompatGuessEnv(GuessEnv):
    agentgym_compat = AgentGymCompat()


@pytest.fixture(scope="module")
def url():
    with serve_env(CompatGuessEnv, max_instances=200, max_body_bytes=4096) as base:
        yield base


def post(url, path, body=None, **kwargs):
    return requests.post(f"{url}{path}", json=body, timeout=10, **kwargs)


def error_code(response) -> str:
    return response.json()["error"]["code"]


def test_guess_env_conforms_over_http():
    check_env_http(GuessEnv)


def test_health_info_tasks_and_openapi(url):
    health = requests.get(f"{url}/v1/health", timeout=5).json()
    assert health["env"] == "guess" and health["protocol_version"] == 1
    info = requests.get(f"{url}/v1/info", timeout=5).json()
    assert "secret integer" in info["instruction"] and info["split_sizes"] == {"train": 900, "test": 100}
    assert len(requests.get(f"{url}/v1/tasks", timeout=5).json()["splits"]["test"]) == 100
    spec = requests.get(f"{url}/openapi.json", timeout=5).json()
    assert "/v1/instances/{instance_id}/step" in spec["paths"]
    assert requests.get(f"{url}/docs", timeout=5).status_code == 200


def test_expert_plays_through_client(url):
    env = HTTPEnv(url)
    try:
        result = solve(env, 905)
        assert result.success is True and result.reward == 1.0 and result.terminated
        with pytest.raises(EpisodeEndedError):
            env.step("guess 1")
        assert env.available_actions() is None
        assert env.parse_action("Thought: low\nAction: guess 3") == "guess 3"
    finally:
        env.close()
    env.close()  # idempotent


def test_expert_searches_the_range_the_env_was_made_with():
    """A warm start on ``GuessEnv(high=16)`` learns binary search over [1, 16], not over [1, 100]."""
    env = GuessEnv(low=1, high=16)
    for task in range(900, 932):
        result = solve(env, task)
        assert result.success is True
        assert env._steps <= 5  # ceil(log2(16 + 1)) guesses at most


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("post", "/v1/instances", {"task_id": "seven"}, 422, "malformed_request"),
        ("post", "/v1/instances", {"task_id": 1, "surprise": 1}, 422, "malformed_request"),
        ("post", "/v1/instances", {"env": "babyai", "task_id": 1}, 404, "unknown_env"),
        ("post", "/v1/instances", {"task_id": 10_000}, 422, "invalid_task"),
        ("post", "/v1/instances/999999/step", {"action": "guess 1"}, 404, "unknown_instance"),
        ("get", "/v1/instances/999999/observation", None, 404, "unknown_instance"),
        ("delete", "/v1/instances/999999", None, 404, "unknown_instance"),
        ("post", "/v1/step_batch", {"steps": "nope"}, 422, "malformed_request"),
    ],
)
def test_malformed_requests_get_their_status_and_server_keeps_serving(url, method, path, body, status, code):
    response = requests.request(method, f"{url}{path}", json=body, timeout=5)
    assert response.status_code == status, response.text
    assert error_code(response) == code
    assert response.json()["error"]["message"]
    assert requests.get(f"{url}/v1/health", timeout=5).status_code == 200


def test_invalid_json_and_oversized_bodies(url):
    broken = requests.post(f"{url}/v1/instances", data=b"{not json", timeout=5,
                           headers={"content-type": "application/json"})
    assert broken.status_code == 422 and error_code(broken) == "malformed_request"
    big = post(url, "/v1/instances", {"task_id": 1, "pad": "x" * 10_000})
    assert big.status_code == 413 and error_code(big) == "body_too_large"

    def chunks():  # no content-length: the limit must hold for streamed bodies too
        yield b'{"task_id": 1, "pad": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    streamed = requests.post(f"{url}/v1/instances", data=chunks(), timeout=5,
                             headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert requests.get(f"{url}/v1/health", timeout=5).status_code == 200


@pytest.mark.parametrize("path", ["/v1/instances", "/create"])
def test_a_body_that_is_not_utf8_is_refused_alike_by_v1_and_the_other_faces(url, path):
    """JSON encoded as UTF-16 is what ``json.loads`` of bytes would take: every face refuses it the same way."""
    response = requests.post(f"{url}{path}", data=json.dumps({"task_id": 1, "id": 1}).encode("utf-16"),
                             headers={"content-type": "application/json"}, timeout=5)
    assert response.status_code == 422, response.text
    assert error_code(response) == "malformed_request"
    assert response.json()["error"]["message"] == "the body is not UTF-8 (byte 0); send JSON encoded as UTF-8"


def test_step_after_end_and_before_reset_are_conflicts(url):
    created = post(url, "/v1/instances", {"task_id": 1})
    assert created.status_code == 201
    instance = created.json()["instance_id"]
    env = HTTPEnv(url)
    env.instance_id = instance
    solve(env, 1)
    again = post(url, f"/v1/instances/{instance}/step", {"action": "guess 1"})
    assert again.status_code == 409 and error_code(again) == "episode_ended"
    idle = post(url, "/v1/instances", {}).json()["instance_id"]
    early = post(url, f"/v1/instances/{idle}/step", {"action": "guess 1"})
    assert early.status_code == 409 and error_code(early) == "no_episode"
    for i in (instance, idle):
        assert requests.delete(f"{url}/v1/instances/{i}", timeout=5).status_code == 200


def test_batched_step_reports_each_item(url):
    a = post(url, "/v1/instances", {"task_id": 3}).json()["instance_id"]
    b = post(url, "/v1/instances", {"task_id": 4}).json()["instance_id"]
    client = EnvClient(url)
    outcomes = client.step_batch([(a, "guess 50"), (b, "nonsense"), (987654, "guess 1")])
    assert [o.status for o in outcomes] == [200, 200, 404]
    assert "than 50" in outcomes[0].result.observation
    assert "Invalid action" in outcomes[1].result.observation
    assert outcomes[2].error.code == "unknown_instance"
    for instance in (a, b):
        requests.delete(f"{url}/v1/instances/{instance}", timeout=5)
    client.close()


def test_64_concurrent_clients_do_not_cross_talk(url):
    """Each client plays its own task by binary search; a crossed answer would break the search."""

    def play(task: int) -> tuple[int, bool, str]:
        env = HTTPEnv(url)
        try:
            result = solve(env, task)
            return task, bool(result.success), result.observation
        finally:
            env.close()

    tasks = list(range(100, 164))
    with ThreadPoolExecutor(max_workers=64) as pool:
        results = list(pool.map(play, tasks))
    import random

    for task, success, observation in results:
        assert success, f"task {task} failed: {observation}"
        assert observation == f"{random.Random(task).randint(1, 100)} is correct!"
    assert requests.get(f"{url}/v1/health", timeout=5).json()["live_instances"] == 0


def test_capacity_answers_503_and_frees_on_close():
    with serve_env(GuessEnv, max_instances=2) as url:
        ids = [post(url, "/v1/instances", {"task_id": 1}).json()["instance_id"] for _ in range(2)]
        full = post(url, "/v1/instances", {"task_id": 1})
        assert full.status_code == 503 and error_code(full) == "at_capacity"
        requests.delete(f"{url}/v1/instances/{ids[0]}", timeout=5)
        assert post(url, "/v1/instances", {"task_id": 1}).status_code == 201


def test_idle_instances_expire():
    with serve_env(GuessEnv, idle_ttl_s=0.5) as url:
        instance = post(url, "/v1/instances", {"task_id": 1}).json()["instance_id"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if requests.get(f"{url}/v1/health", timeout=5).json()["live_instances"] == 0:
                break
            time.sleep(0.2)
        response = post(url, f"/v1/instances/{instance}/step", {"action": "guess 1"})
        assert response.status_code == 404 and "expired" in response.json()["error"]["message"]


def test_client_raises_typed_errors(url):
    env = HTTPEnv(url)
    with pytest.raises(InvalidTaskError):
        env.reset(123456)
    with pytest.raises(RemoteError) as excinfo:
        HTTPEnv(url, env="babyai").reset(1)
    assert excinfo.value.status == 404


def test_client_reports_unreachable_server():
    env = HTTPEnv("http://127.0.0.1:9", timeout=1)
    env.client.retries = 1
    with pytest.raises(Exception, match="cannot reach the environment server"):
        env.reset(1)


def test_agentgym_legacy_routes(url):
    created = post(url, "/create")
    assert created.status_code == 200
    instance = created.json()["id"]
    reset = post(url, "/reset", {"id": instance, "data_idx": 7}).json()
    assert reset["observation"].startswith("Guess the secret") and reset["done"] is False
    step = post(url, "/step", {"id": instance, "action": "guess 50"}).json()
    assert set(step) == {"observation", "reward", "score", "done"}
    observation = requests.get(f"{url}/observation", params={"id": instance}, timeout=5).json()
    assert observation == step["observation"]
    assert post(url, "/step", {"id": instance}).json() == {
        "error": "request body needs the field 'action'; got ['id']"}
    assert "error" in post(url, "/step", {"id": 424242, "action": "x"}).json()
    assert post(url, "/close", {"id": instance}).json() == {"id": instance, "closed": True}
    assert json.loads(requests.get(f"{url}/", timeout=5).text).startswith("This is environment guess")


def test_agentgym_routes_answer_a_missing_body_422_as_agentgym_does(url):
    # AgentGym's servers read typed bodies: a request with none is a 422, not a 200 {"error": ...}.
    # (An empty /reset is OpenEnv's, which shares the path: tests/agentgym_core/http/test_openenv_face.py.)
    for path, needs in (("/step", "'id': ..., 'action'"), ("/close", "'id'")):
        for headers in ({}, {"content-type": "application/json"}):
            answer = requests.post(f"{url}{path}", data=b"", headers=headers, timeout=10)
            assert answer.status_code == 422, (path, answer.text)
            assert answer.json()["error"]["code"] == "malformed_request"
            assert needs.replace("'", '"') in answer.json()["error"]["message"]
    assert "id" in post(url, "/create").json()  # /create takes no body


class RenamedCompatGuessEnv(GuessEnv):
    """AgentGym servers that name things differently (WebArena's env_idx/idx, SciWorld's extras)."""

    agentgym_compat = AgentGymCompat(
        id_field="env_idx", task_field="idx", done_field="terminated", include_score=False,
        reset_info_fields={"task_name": "name"}, step_extra_fields=("truncated", "success"),
    )

    def reset(self, task_id, seed=None):
        result = super().reset(task_id, seed)
        result.info["name"] = f"guess-{task_id}"
        return result


def test_agentgym_routes_follow_the_env_field_names():
    with serve_env(RenamedCompatGuessEnv) as url:
        instance = post(url, "/create").json()["env_idx"]
        reset = post(url, "/reset", {"env_idx": instance, "idx": 2}).json()
        assert reset == {"task_name": "guess-2", "observation": reset["observation"], "reward": 0.0,
                         "terminated": False}
        step = post(url, "/step", {"env_idx": instance, "action": "guess 50"}).json()
        assert set(step) == {"observation", "reward", "terminated", "truncated", "success"}
        observed = requests.get(f"{url}/observation", params={"env_idx": instance}, timeout=5).json()
        assert observed == step["observation"]
        assert "needs ?env_idx=" in requests.get(f"{url}/observation", params={"id": instance},
                                                           timeout=5).json()["error"]


class BareAnswersGuessEnv(GuessEnv):
    """searchqa-style answers: a bare id from /create, the bare observation from /reset."""

    agentgym_compat = AgentGymCompat(id_field="env_idx", task_field="id", create_answer="bare_id",
                                     reset_answer="text", close_answer="bool")


def test_agentgym_routes_with_bare_answers():
    with serve_env(BareAnswersGuessEnv) as url:
        instance = post(url, "/create").json()
        assert isinstance(instance, int)
        assert post(url, "/reset", {"env_idx": instance, "id": 5}).json().startswith("Guess the secret")
        assert post(url, "/close", {"env_idx": instance}).json() is True


class StatusObservationGuessEnv(GuessEnv):
    """BabyAI-style /observation: a status object from an env method instead of the text."""

    agentgym_compat = AgentGymCompat(observation_method="status")

    def status(self):
        return {"observation": "status of the game", "done": False}


def test_agentgym_observation_route_can_answer_an_env_method():
    with serve_env(StatusObservationGuessEnv) as url:
        instance = post(url, "/create").json()["id"]
        before = requests.get(f"{url}/observation", params={"id": instance}, timeout=5).json()
        assert "no episode yet" in before["error"]
        post(url, "/reset", {"id": instance, "data_idx": 1})
        observed = requests.get(f"{url}/observation", params={"id": instance}, timeout=5).json()
        assert observed == {"observation": "status of the game", "done": False}


def test_agentgym_observation_method_must_exist():
    class Misnamed(GuessEnv):
        agentgym_compat = AgentGymCompat(observation_method="stauts")

    with pytest.raises(TypeError, match="has no such method"), serve_env(Misnamed):
        pass


class EngineScoreGuessEnv(GuessEnv):
    """SciWorld-style /step: reward and score read from the step's info, in their usual places."""

    agentgym_compat = AgentGymCompat(step_info_fields={"reward": "engine_reward", "score": "engine_score"})

    def step(self, action):
        result = super().step(action)
        result.info.update(engine_reward=-7, engine_score=-100)
        return result


def test_agentgym_step_fields_can_come_from_the_step_info():
    with serve_env(EngineScoreGuessEnv) as url:
        instance = post(url, "/create").json()["id"]
        post(url, "/reset", {"id": instance, "data_idx": 1})
        step = post(url, "/step", {"id": instance, "action": "guess 50"}).json()
        assert list(step) == ["observation", "reward", "score", "done"]
        assert (step["reward"], step["score"]) == (-7, -100)


# -- issue 40: request_id reuse, strict ids, thread-unsafe environments ------------------------------
def test_a_request_id_reused_for_another_request_answers_409_not_the_first_instance(url):
    first = post(url, "/v1/instances", {"task_id": 1, "request_id": "reuse-1"})
    assert first.status_code == 201
    again = post(url, "/v1/instances", {"task_id": 1, "request_id": "reuse-1"})
    assert again.status_code == 201 and again.json()["instance_id"] == first.json()["instance_id"]
    for other in ({"task_id": 5}, {"task_id": 1, "seed": 7}, {}):
        reused = post(url, "/v1/instances", {**other, "request_id": "reuse-1"})
        assert reused.status_code == 409 and error_code(reused) == "request_id_reused", reused.text
        assert "fresh request_id" in reused.json()["error"]["message"]


def test_path_ids_are_read_strictly(url):
    instance_id = post(url, "/v1/instances", {"task_id": 1}).json()["instance_id"]
    assert requests.get(f"{url}/v1/instances/{instance_id}/observation", timeout=5).status_code == 200
    for written in (f"+{instance_id}", f"0{instance_id}", f"{instance_id}.0", f"%20{instance_id}", f"{instance_id:_}",
                    f"-{instance_id}"):
        answer = requests.get(f"{url}/v1/instances/{written}/observation", timeout=5)
        assert answer.status_code == 422 and error_code(answer) == "malformed_request", (written, answer.text)
        assert "plain decimal digits" in answer.json()["error"]["message"]
    assert post(url, f"/v1/instances/0{instance_id}/step", {"action": "guess 1"}).status_code == 422
    assert requests.delete(f"{url}/v1/instances/+{instance_id}", timeout=5).status_code == 422


class _Overlap:
    """Counts calls inside an environment at once; ``most`` is the highest count seen."""

    def __init__(self) -> None:
        import threading

        self.lock, self.inside, self.most = threading.Lock(), 0, 0

    def enter(self) -> None:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.02)  # long enough for a second thread to come in, if it may
        with self.lock:
            self.inside -= 1


class SharedStateGuessEnv(GuessEnv):
    """A guess env that records how many of its calls run at once (across all its instances)."""

    overlap = _Overlap()

    def reset(self, task_id, seed=None):
        self.overlap.enter()
        return super().reset(task_id, seed)

    def step(self, action):
        self.overlap.enter()
        return super().step(action)


class UnsafeGuessEnv(SharedStateGuessEnv):
    thread_safe = False
    overlap = _Overlap()


@pytest.mark.parametrize("env_cls", [SharedStateGuessEnv, UnsafeGuessEnv], ids=["thread-safe", "not-thread-safe"])
def test_a_thread_unsafe_env_is_called_one_call_at_a_time(env_cls):
    def play(task: int) -> None:
        env = HTTPEnv(url)
        try:
            env.reset(task)
            for guess in range(1, 5):
                env.step(f"guess {guess}")
        finally:
            env.close()

    with serve_env(env_cls) as url, ThreadPoolExecutor(8) as pool:
        list(pool.map(play, range(8)))
    # In this process too (the rollout engine calls in-process envs from its threads).
    envs = [env_cls() for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda e: [e.reset(1), e.step("guess 1")], envs))
    if env_cls.thread_safe:
        assert env_cls.overlap.most > 1  # the check can see overlap: calls do run in parallel by default
    else:
        assert env_cls.overlap.most == 1


def test_compat_numbers_are_typed_as_agentgym_recorded_them():
    """AgentGym's BabyAI server answers ``"reward": 0`` (an integer) and ``0.973`` when it is not whole;
    a client comparing JSON text, or a typed one, sees the difference (issue 40, 8)."""
    import gzip
    from pathlib import Path

    from agentgym_env_babyai import BabyAIEnv

    fixture = Path(__file__).parents[2] / "agentgym_env_babyai" / "fixtures" / "agentgym_anchor_babyai.json.gz"
    with gzip.open(fixture, "rt", encoding="utf-8") as f:
        recorded = json.load(f)
    anchor = recorded[:20] + recorded[85:90]  # index 87 earns a reward that is not whole

    def types(answer: dict) -> dict:
        return {k: type(v).__name__ for k, v in answer.items()}

    seen = set()
    with serve_env(BabyAIEnv) as base, requests.Session() as http:
        for record in anchor:
            instance = http.post(f"{base}/create", json={}).json()["id"]
            reset = http.post(f"{base}/reset", json={"id": instance, "data_idx": record["data_idx"]}).json()
            assert types(reset) == types(record["reset"])
            for step in record["steps"]:
                ours = http.post(f"{base}/step", json={"id": instance, "action": step["action"]}).json()
                assert types(ours) == types(step["answer"]), (record["data_idx"], ours, step["answer"])
                seen.add(type(step["answer"]["reward"]).__name__)
            assert http.post(f"{base}/close", json={"id": instance}).json() is True
            assert http.post(f"{base}/close", json={"id": instance}).json() is False  # as AgentGym answers
    assert seen == {"int", "float"}
