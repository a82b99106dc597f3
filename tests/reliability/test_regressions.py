"""Regression tests for the server defects of issue 20 (each failed on the code before the fix).

1. a compat /create with a bad data_idx kept its instance (slot leak);
2. instance ids restarted at 0, so an old id stepped another client's episode after a restart;
3. a create retried after a read timeout left orphan instances;
4. a lone surrogate in a BabyAI compat step answered 500 after the step and broke later reads;
5. loose input: bools and floats as ids, null actions, unbounded actions, {"detail"} answers to
   malformed bodies, negative --idle-ttl, and slow clients never timed out.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from agentgym_core.env import ResetResult
from agentgym_core.http.client import EnvClient, HTTPEnv
from agentgym_core.http.compat import AgentGymCompat
from agentgym_core.http.server import create_app
from agentgym_core.http.serving import serve_env
from agentgym_env_babyai import BabyAIEnv
from agentgym_env_guess import GuessEnv
from agentgym_env_textcraft import TextCraftEnv


class CompatGuessEnv(GuessEnv):
    agentgym_compat = AgentGymCompat()


class SlowResetGuessEnv(GuessEnv):
    """A reset that takes longer than the client's read timeout."""

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        time.sleep(1.2)
        return super().reset(task_id, seed)


def live(url: str) -> int:
    return requests.get(f"{url}/v1/health", timeout=5).json()["live_instances"]


# -- 1. validate before allocating ---------------------------------------------------------------
@pytest.mark.parametrize("bad", ["abc", None, "Infinity", 1.5, True, [], 10**30])
def test_textcraft_compat_create_with_bad_data_idx_holds_no_slot(bad):
    with serve_env(TextCraftEnv, max_instances=3) as url:
        for _ in range(6):  # twice the cap: a leak would fill it
            answer = requests.post(f"{url}/create", json={"data_idx": bad}, timeout=10)
            assert answer.status_code == 200 and "error" in answer.json(), answer.text
        assert live(url) == 0
        assert "id" in requests.post(f"{url}/create", json={"data_idx": 1}, timeout=10).json()


def test_native_create_with_invalid_task_holds_no_slot():
    with serve_env(GuessEnv, max_instances=2) as url:
        for task in (-1, 10**6, "3", 2.0):
            answer = requests.post(f"{url}/v1/instances", json={"task_id": task}, timeout=10)
            assert answer.status_code == 422 and answer.json()["error"]["code"] in {"invalid_task", "malformed_request"}
        assert live(url) == 0


# -- 2. ids are never reused across server lifetimes ---------------------------------------------
def test_an_id_from_before_a_restart_is_unknown_not_someone_elses():
    with serve_env(CompatGuessEnv) as url:
        old = requests.post(f"{url}/v1/instances", json={"task_id": 1}, timeout=10).json()["instance_id"]
        old_compat = requests.post(f"{url}/create", json={}, timeout=10).json()["id"]
    with serve_env(CompatGuessEnv) as url:  # the "restarted" server
        new = [requests.post(f"{url}/v1/instances", json={"task_id": 2}, timeout=10).json()["instance_id"]
               for _ in range(5)]
        new.append(requests.post(f"{url}/create", json={}, timeout=10).json()["id"])
        assert old not in new and old_compat not in new
        answer = requests.post(f"{url}/v1/instances/{old}/step", json={"action": "guess 5"}, timeout=10)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "unknown_instance"
        compat = requests.post(f"{url}/step", json={"id": old_compat, "action": "guess 5"}, timeout=10).json()
        assert "no live instance" in compat["error"]


# -- 3. a retried create makes one instance --------------------------------------------------------
def test_create_with_the_same_request_id_answers_the_same_instance():
    with serve_env(GuessEnv) as url:
        body = {"task_id": 3, "request_id": "req-42"}
        first = requests.post(f"{url}/v1/instances", json=body, timeout=10).json()
        again = requests.post(f"{url}/v1/instances", json=body, timeout=10).json()
        assert again == first and live(url) == 1
        other = requests.post(f"{url}/v1/instances", json={**body, "request_id": "req-43"}, timeout=10).json()
        assert other["instance_id"] != first["instance_id"] and live(url) == 2


def test_a_create_retried_after_a_read_timeout_leaves_no_orphans():
    with serve_env(SlowResetGuessEnv) as url:
        env = HTTPEnv(client=EnvClient(url, timeout=0.4, retries=4))
        result = env.reset(7)  # attempts time out while the server still resets; a retry gets the answer
        assert result.observation.startswith("Guess")
        assert live(url) == 1
        env.close()
        assert live(url) == 0


# -- 4. a handler error leaves the instance consistent ---------------------------------------------
def test_lone_surrogate_step_neither_500s_nor_breaks_the_instance():
    with serve_env(BabyAIEnv) as url:
        instance = requests.post(f"{url}/create", json={}, timeout=10).json()["id"]
        requests.post(f"{url}/reset", json={"id": instance, "data_idx": 0}, timeout=10).raise_for_status()
        before = requests.get(f"{url}/observation", params={"id": instance}, timeout=10)
        raw = b'{"id": %d, "action": "\\ud800"}' % instance
        answer = requests.post(f"{url}/step", data=raw, headers={"content-type": "application/json"}, timeout=10)
        assert answer.status_code == 200 and "surrogate" in answer.json()["error"]
        after = requests.get(f"{url}/observation", params={"id": instance}, timeout=10)
        assert after.status_code == 200 and after.json() == before.json()  # nothing was applied
        step = requests.post(f"{url}/step", json={"id": instance, "action": "turn left"}, timeout=10)
        assert step.status_code == 200 and "error" not in step.json()
        created = requests.post(f"{url}/v1/instances", json={"task_id": 0}, timeout=10).json()["instance_id"]
        native = requests.post(f"{url}/v1/instances/{created}/step", data=b'{"action": "\\udfff"}',
                               headers={"content-type": "application/json"}, timeout=10)
        assert native.status_code == 422 and native.json()["error"]["code"] == "malformed_request"


# -- 5. loose input ---------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["one process", "--workers 2"])
def guess_url(request):
    """A compat server in this process, then a real `agentgym serve textcraft --workers 2` (its front
    reads bodies and ids before any worker does)."""
    if request.param == "--workers 2":
        yield request.getfixturevalue("textcraft_workers_url")
        return
    with serve_env(CompatGuessEnv, max_body_bytes=1 << 20) as url:
        yield url


@pytest.mark.parametrize("instance_id", [True, 1.9, "1", None])
def test_compat_ids_must_be_integers(guess_url, instance_id):
    requests.post(f"{guess_url}/create", json={}, timeout=10)
    answer = requests.post(f"{guess_url}/step", json={"id": instance_id, "action": "guess 1"}, timeout=10).json()
    assert "must be an integer" in answer["error"]


@pytest.mark.parametrize("action", [None, 5, ["guess 1"], "g" * 70_000])
def test_compat_actions_must_be_bounded_strings(guess_url, action):
    instance = requests.post(f"{guess_url}/create", json={}, timeout=10).json()["id"]
    requests.post(f"{guess_url}/reset", json={"id": instance, "data_idx": 1}, timeout=10)
    answer = requests.post(f"{guess_url}/step", json={"id": instance, "action": action}, timeout=10).json()
    assert "error" in answer and ("must be a string" in answer["error"] or "limit" in answer["error"])
    step = requests.post(f"{guess_url}/step", json={"id": instance, "action": "guess 50"}, timeout=10).json()
    assert "error" not in step  # the refused action was not applied as a turn


@pytest.mark.parametrize("body", [b"\xff\xfe{}", b"[" * 20_000 + b"]" * 20_000, b'{"task_id": ' + b"9" * 5000 + b"}",
                                  b'{"task_id": 1', b'{"task_id": true}', b'{"task_id": 1.0}'])
def test_every_malformed_body_gets_the_protocol_error_shape(guess_url, body):
    answer = requests.post(f"{guess_url}/v1/instances", data=body, headers={"content-type": "application/json"},
                           timeout=10)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "malformed_request" and "detail" not in answer.json()


def test_compat_routes_answer_unreadable_bodies_422_as_agentgym_does(guess_url):
    # AgentGym's servers (FastAPI with typed bodies) answer a body that is not JSON 422 (issue 40, 8).
    for body in (b"\xff", b"[" * 20_000, b'{"id": ' + b"9" * 5000 + b', "action": "x"}', b'{"id": 1,'):
        answer = requests.post(f"{guess_url}/step", data=body, headers={"content-type": "application/json"},
                               timeout=10)
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "malformed_request", answer.text
    # A readable body with a wrong field is still AgentGym's 200 {"error": str}.
    wrong = requests.post(f"{guess_url}/step", json={"id": "x", "action": "a"}, timeout=10)
    assert wrong.status_code == 200 and isinstance(wrong.json()["error"], str)


def test_unknown_routes_and_methods_get_the_protocol_error_shape(guess_url):
    missing = requests.get(f"{guess_url}/v1/nothing-here", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = requests.put(f"{guess_url}/v1/health", timeout=10)
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


def test_the_schema_states_what_the_server_enforces(guess_url):
    spec = requests.get(f"{guess_url}/openapi.json", timeout=10).json()
    create = spec["components"]["schemas"]["Create"]["properties"]["task_id"]["anyOf"][0]
    assert create["minimum"] == 0  # a negative task is refused, and the schema says so


@pytest.mark.parametrize("options", [{"idle_ttl_s": -1}, {"idle_ttl_s": 0}, {"max_instances": 0},
                                     {"idle_ttl_s": float("nan")}, {"max_body_bytes": 10}])
def test_nonsense_server_options_are_refused(options):
    with pytest.raises(ValueError, match="must be"):
        create_app(GuessEnv, **options)


def test_cli_refuses_a_negative_idle_ttl():
    agentgym = Path(sys.executable).with_name("agentgym")
    done = subprocess.run([str(agentgym), "serve", "guess", "--idle-ttl", "-1"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "--idle-ttl must be at least" in done.stderr


def test_a_client_trickling_its_headers_is_cut_off():
    with serve_env(GuessEnv, header_timeout_s=0.5, body_timeout_s=0.5) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
            start, received = time.monotonic(), b""
            for _ in range(25):  # one header byte every 0.1 s, for up to 2.5 s
                try:
                    sock.sendall(b"X")
                    time.sleep(0.1)
                    sock.setblocking(False)
                    chunk = sock.recv(4096)
                    sock.setblocking(True)
                except BlockingIOError:
                    sock.setblocking(True)
                    continue
                except OSError:
                    break
                received += chunk
                if not chunk:
                    break
            assert time.monotonic() - start < 2.0, "the slow client was never cut off"
            assert b"408" in received.split(b"\r\n")[0] or received == b""
        # A well-behaved client on the same server is served.
        assert requests.get(f"{url}/v1/health", timeout=5).status_code == 200


def test_a_client_stalling_its_body_is_cut_off():
    with serve_env(GuessEnv, header_timeout_s=5, body_timeout_s=0.5) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"POST /v1/instances HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                         b"content-length: 100\r\n\r\n{")
            start = time.monotonic()
            answer = sock.recv(4096)
            assert time.monotonic() - start < 3 and answer.startswith(b"HTTP/1.1 408")
            assert b"request_timeout" in answer


def test_observation_id_of_non_ascii_digits_is_refused_like_any_malformed_id():
    """``"²".isdigit()`` is true in Python and ``int("²")`` raises: the id check takes ASCII digits only,
    so the client hears the same "needs an integer id" answer as for ``abc`` (BabyAI's compat answers
    errors as AgentGym does, in a 200 body), not an environment error with a traceback in the log."""
    with serve_env(BabyAIEnv) as url:
        for bad in ("²", "abc"):
            answer = requests.get(f"{url}/observation", params={"id": bad}, timeout=10)
            assert "needs ?id=<integer instance id>" in answer.json()["error"]
