"""`agentgym serve --workers N`: instances stay on their worker, whatever connection a request uses,
and the server keeps one process's guarantees (issue 40): one owner per request_id, batches validated
whole, health summed over workers, strict ids, and a dead or hung worker restarted while the other
workers' episodes go on."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from agentgym_core.commands.serve import check_port_free
from agentgym_core.http.instances import InstanceTable
from agentgym_core.http.workers import create_owner, owner_of
from agentgym_env_guess import GuessEnv

pytest.importorskip("agentgym_env_textcraft")

AGENTGYM = str(Path(sys.executable).with_name("agentgym"))
# The server is a separate `agentgym serve` process: it finds the installed TextCraft package.
SERVER_ENV = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}


def test_a_shard_hands_out_only_its_own_ids():
    table = InstanceTable(GuessEnv, max_instances=64, idle_ttl_s=None, shard=(2, 3))
    ids = [table.create()[0].instance_id for _ in range(40)]
    assert {owner_of(i, 3) for i in ids} == {2}
    assert len(set(ids)) == 40
    with pytest.raises(ValueError, match="shard"):
        InstanceTable(GuessEnv, max_instances=1, idle_ttl_s=None, shard=(3, 3))


def test_workers_must_be_at_least_one():
    done = subprocess.run([AGENTGYM, "serve", "textcraft", "--workers", "0"], capture_output=True, text=True,
                          timeout=60, env=SERVER_ENV)
    assert done.returncode == 2
    assert "--workers must be at least 1" in done.stderr


@pytest.fixture(scope="module")
def url():
    server, base = _start_workers()
    port = int(base.rsplit(":", 1)[1])
    yield base
    server.terminate()
    assert server.wait(timeout=30) == 0
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass  # every worker is gone with the parent


def _log() -> Any:
    """Where a server's stderr goes: a file (a full pipe would block a worker that logs, and its
    supervisor would take it for hung)."""
    return tempfile.TemporaryFile("w+")


def _start_workers(*options: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """``agentgym serve textcraft --workers 2 --port 0 OPTIONS`` and its URL, once it answers.

    The server picks a free port itself and prints it: a port the test picked and freed for the server
    could be picked by a test running beside it meanwhile, and SO_REUSEPORT would let both servers share it.
    """
    # Open for the server's life, appended to by it, read here by name.
    out = tempfile.NamedTemporaryFile("a+", suffix=".out")  # noqa: SIM115
    server = subprocess.Popen([AGENTGYM, "serve", "textcraft", "--workers", "2", "--port", "0", *options],
                              stdout=out, stderr=_log(), text=True, env=env or SERVER_ENV)
    try:
        base = _served_url(server, out.name)
        _wait_until_serving(server, base)
    except BaseException:
        server.terminate()  # its workers go with it
        server.wait(timeout=30)
        raise
    return server, base


def _served_url(server: subprocess.Popen, out_path: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = re.search(r"on (http://127\.0\.0\.1:\d+) ", Path(out_path).read_text())
        if found:
            return found.group(1)
        if server.poll() is not None:
            pytest.fail(f"server exited with status {server.returncode} (run it by hand to see why)")
        time.sleep(0.1)
    pytest.fail("server printed no address in 120 s")


def _wait_until_serving(server: subprocess.Popen, base: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        if server.poll() is not None:
            pytest.fail(f"server exited with status {server.returncode} (run it by hand to see why)")
        try:
            requests.get(f"{base}/v1/health", timeout=5)
            return
        except (requests.ConnectionError, requests.Timeout):  # bound before the workers serve
            if time.monotonic() > deadline:
                pytest.fail("server did not start in 120 s")
            time.sleep(0.3)


def test_v1_requests_on_fresh_connections_reach_their_own_instance(url):
    # requests.post without a session opens a connection per request: the kernel picks the worker.
    created = [requests.post(f"{url}/v1/instances", json={"task_id": task}, timeout=10).json()
               for task in range(16)]
    ids = [c["instance_id"] for c in created]
    assert {owner_of(i, 2) for i in ids} == {0, 1}  # both workers hold instances (fails with p = 2**-15)
    for task, instance_id in enumerate(ids):
        for _ in range(2):
            state = requests.get(f"{url}/v1/instances/{instance_id}/observation", timeout=10).json()
            assert (state["instance_id"], state["task_id"]) == (instance_id, task)
        step = requests.post(f"{url}/v1/instances/{instance_id}/step", json={"action": "inventory"}, timeout=10)
        assert step.status_code == 200 and step.json()["instance_id"] == instance_id

    batch = requests.post(f"{url}/v1/step_batch", timeout=10, json={
        "steps": [{"instance_id": i, "action": "inventory"} for i in ids] + [{"instance_id": 12, "action": "x"}]})
    results = batch.json()["results"]
    assert [r["instance_id"] for r in results] == [*ids, 12]
    assert [r["status"] for r in results] == [200] * 16 + [404]

    for instance_id in ids:
        assert requests.delete(f"{url}/v1/instances/{instance_id}", timeout=10).status_code == 200
        gone = requests.post(f"{url}/v1/instances/{instance_id}/step", json={"action": "inventory"}, timeout=10)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "unknown_instance"


def test_agentgym_routes_reach_their_own_instance(url):
    ids = [requests.post(f"{url}/create", json={}, timeout=10).json()["id"] for _ in range(12)]
    assert {owner_of(i, 2) for i in ids} == {0, 1}
    for task, instance_id in enumerate(ids):
        reset = requests.post(f"{url}/reset", json={"id": instance_id, "data_idx": task}, timeout=10).json()
        observed = requests.get(f"{url}/observation", params={"id": instance_id}, timeout=10).json()
        assert observed == reset["observation"]
        step = requests.post(f"{url}/step", json={"id": instance_id, "action": "inventory"}, timeout=10).json()
        assert "error" not in step and step["observation"].startswith("Inventory")
    for instance_id in ids:
        assert requests.post(f"{url}/close", json={"id": instance_id}, timeout=10).json() is True  # as AgentGym
        again = requests.post(f"{url}/step", json={"id": instance_id, "action": "inventory"}, timeout=10).json()
        assert "no live instance" in again["error"]
    # Bad bodies are still answered by a worker, in AgentGym's error shape.
    assert "error" in requests.post(f"{url}/step", json={"id": True, "action": "x"}, timeout=10).json()
    assert "error" in requests.post(f"{url}/step", data=b"{nope", timeout=10).json()
    assert requests.get(f"{url}/v1/instances/%C2%B2/observation", timeout=10).status_code == 422  # "²"
    too_large = requests.post(f"{url}/step", data=b" " * ((1 << 20) + 1), timeout=10)
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "body_too_large"


def _worker_of(proc: Path, parent: int) -> bool:
    try:
        fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]) == parent and b"spawn_main" in (proc / "cmdline").read_bytes()
    except (OSError, IndexError, ValueError):
        return False


def _instances_on_both_workers(url: str, task: int = 0, headers: dict | None = None) -> dict[int, int]:
    """worker -> an instance it holds, reset onto ``task`` (fresh connections until both hold one)."""
    held: dict[int, int] = {}
    for _ in range(60):
        answer = requests.post(f"{url}/v1/instances", json={"task_id": task}, headers=headers, timeout=10)
        assert answer.status_code == 201, answer.text
        held.setdefault(owner_of(answer.json()["instance_id"], 2), answer.json()["instance_id"])
        if len(held) == 2:
            return held
    pytest.fail("60 creates on fresh connections all landed on one worker")


def _inventory(url: str, instance_id: int) -> str:
    answer = requests.post(f"{url}/v1/instances/{instance_id}/step", json={"action": "inventory"}, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["observation"]


def test_creates_with_one_request_id_make_one_instance_whichever_worker_takes_them(url):
    request_id = uuid.uuid4().hex
    body = {"task_id": 3, "request_id": request_id}
    before = requests.get(f"{url}/v1/health", timeout=10).json()["live_instances"]
    answers = [requests.post(f"{url}/v1/instances", json=body, timeout=10) for _ in range(20)]
    with ThreadPoolExecutor(16) as pool:  # and at once, while the first may still be running
        answers += list(pool.map(lambda _: requests.post(f"{url}/v1/instances", json=body, timeout=10), range(16)))
    assert {a.status_code for a in answers} == {201}
    ids = {a.json()["instance_id"] for a in answers}
    assert len(ids) == 1  # before: one instance per worker that took a create
    assert owner_of(ids.pop(), 2) == create_owner(request_id, 2)
    assert requests.get(f"{url}/v1/health", timeout=10).json()["live_instances"] == before + 1


def test_a_request_id_reused_for_another_task_answers_409_on_every_worker(url):
    request_id = uuid.uuid4().hex
    first = requests.post(f"{url}/v1/instances", json={"task_id": 1, "request_id": request_id}, timeout=10)
    assert first.status_code == 201
    for _ in range(6):  # fresh connections: both workers take some
        reused = requests.post(f"{url}/v1/instances", json={"task_id": 5, "request_id": request_id}, timeout=10)
        assert reused.status_code == 409, reused.text
        assert reused.json()["error"]["code"] == "request_id_reused"
        assert "task_id=1" in reused.json()["error"]["message"]


def test_a_batch_with_one_bad_step_is_refused_whole_before_any_step_runs(url):
    held = _instances_on_both_workers(url)
    for receiver in range(6):  # whichever worker receives the batch, with the bad step for either worker
        bad_at = receiver % 2
        steps = [{"instance_id": held[w], "action": "get 1 oak logs"} for w in (0, 1)]
        steps[bad_at] = {"instance_id": held[bad_at], "action": 5}
        answer = requests.post(f"{url}/v1/step_batch", json={"steps": steps}, timeout=10)
        assert answer.status_code == 422, answer.text
        assert f"steps.{bad_at}.action" in answer.json()["error"]["message"]  # the client's own index
        for worker in (0, 1):  # neither part ran: nothing was picked up
            assert "not carrying anything" in _inventory(url, held[worker])


def test_health_sums_and_names_every_worker(url):
    held = _instances_on_both_workers(url)
    for _ in range(4):  # whichever worker answers, it speaks for both
        health = requests.get(f"{url}/v1/health", timeout=10).json()
        assert [w["worker"] for w in health["workers"]] == [0, 1]
        assert all(w["status"] == "ok" and w["pid"] > 0 for w in health["workers"])
        assert health["live_instances"] == sum(w["live_instances"] for w in health["workers"])
        assert all(w["live_instances"] >= 1 for w in health["workers"])
        assert health["max_instances"] == 2 * health["workers"][0]["max_instances"]
    for instance_id in held.values():
        requests.delete(f"{url}/v1/instances/{instance_id}", timeout=10)


def test_ids_are_read_strictly_by_the_front_and_the_app(url):
    held = _instances_on_both_workers(url)
    for instance_id in held.values():
        for written in (f"+{instance_id}", f"0{instance_id}", f"{instance_id}.0", f"%20{instance_id}",
                        f"{instance_id}%20", f"{instance_id:_}"):
            answer = requests.get(f"{url}/v1/instances/{written}/observation", timeout=10)
            assert answer.status_code == 422, (written, answer.text)
            assert answer.json()["error"]["code"] == "malformed_request"
    # A repeated query key is refused, by whichever worker, never read two ways.
    created = [requests.post(f"{url}/create", json={}, timeout=10).json()["id"] for _ in range(2)]
    for _ in range(4):
        twice = requests.get(f"{url}/observation?id={created[0]}&id={created[1]}", timeout=10).json()
        assert "give it once" in twice["error"]


def test_compat_numbers_and_second_close_answer_as_agentgym(url):
    instance_id = requests.post(f"{url}/create", json={}, timeout=10).json()["id"]
    reset = requests.post(f"{url}/reset", json={"id": instance_id, "data_idx": 0}, timeout=10)
    assert '"reward":0' in reset.text.replace(" ", "")
    step = requests.post(f"{url}/step", json={"id": instance_id, "action": "inventory"}, timeout=10)
    assert step.json()["reward"] == 0 and '"reward":0,' in step.text.replace(" ", "")  # not 0.0
    assert requests.post(f"{url}/close", json={"id": instance_id}, timeout=10).json() is True
    assert requests.post(f"{url}/close", json={"id": instance_id}, timeout=10).json() is False
    assert requests.post(f"{url}/step", data=b'{"id": 1, "action":', timeout=10).status_code == 422


TOKEN = "workers-test-token"


def _wait_for_restart(url: str, worker: int, restarts: int, headers: dict) -> dict:
    deadline = time.monotonic() + 90
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = requests.get(f"{url}/v1/health", headers=headers, timeout=5)
            health = last.json()
        except (requests.RequestException, ValueError) as e:  # this connection went to the worker being replaced
            last = e
            time.sleep(0.2)
            continue
        entry = health["workers"][worker]
        if entry["restarts"] >= restarts and entry["status"] == "ok":
            return health
        time.sleep(0.2)
    pytest.fail(f"worker {worker} was not restarted within 90 s; the last health answer: "
                f"{getattr(last, 'text', last)!r}")


@pytest.mark.slow
def test_a_hung_or_killed_worker_is_restarted_and_the_other_workers_episodes_go_on():
    server, base = _start_workers("--worker-timeout", "2", "--token", TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        assert requests.get(f"{base}/v1/health", timeout=10).status_code == 401  # the token is asked for
        for victim, how in ((1, signal.SIGSTOP), (0, signal.SIGKILL)):
            health = _wait_for_restart(base, victim, 0, auth)
            held = _instances_on_both_workers(base, headers=auth)
            survivor = 1 - victim
            step = requests.post(f"{base}/v1/instances/{held[survivor]}/step", json={"action": "get 1 oak logs"},
                                 headers=auth, timeout=10)
            assert step.status_code == 200
            restarts = health["workers"][victim]["restarts"]
            os.kill(health["workers"][victim]["pid"], how)
            _wait_for_restart(base, victim, restarts + 1, auth)
            # The survivor's episode goes on, on fresh connections that reach either worker.
            for _ in range(12):
                answer = requests.post(f"{base}/v1/instances/{held[survivor]}/step", json={"action": "inventory"},
                                       headers=auth, timeout=10)
                assert answer.status_code == 200 and "oak logs" in answer.json()["observation"], answer.text
            lost = requests.post(f"{base}/v1/instances/{held[victim]}/step", json={"action": "inventory"},
                                 headers=auth, timeout=10)
            assert lost.status_code == 404 and "was restarted" in lost.json()["error"]["message"]
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_path_token_works_whichever_worker_takes_the_request():
    """The front checks the token once and strips a path token; the worker's app must not check again.
    (Before: 20 of 20 creates through /token/TOKEN/ answered 401 with --workers 2.)"""
    server, url = _start_workers(env={**SERVER_ENV, "AGENTGYM_TOKEN": TOKEN})  # off the command line
    base = f"{url}/token/{TOKEN}"
    try:
        assert requests.post(f"{url}/create", json={}, timeout=10).status_code == 401
        ids = []
        for _ in range(20):  # fresh connections: the kernel hands them to both workers
            answer = requests.post(f"{base}/create", json={}, timeout=10)
            assert answer.status_code == 200, answer.text
            ids.append(answer.json()["id"])
        assert {owner_of(i, 2) for i in ids} == {0, 1}
        for task, instance_id in enumerate(ids[:10]):  # an AgentGym client's episode, token in its base URL
            reset = requests.post(f"{base}/reset", json={"id": instance_id, "data_idx": task}, timeout=10)
            assert reset.status_code == 200 and "error" not in reset.json(), reset.text
            step = requests.post(f"{base}/step", json={"id": instance_id, "action": "inventory"}, timeout=10)
            assert step.status_code == 200 and step.json()["observation"].startswith("Inventory"), step.text
            assert requests.post(f"{base}/close", json={"id": instance_id}, timeout=10).json() is True
        created = requests.post(f"{base}/v1/instances", json={"task_id": 2}, timeout=10)
        assert created.status_code == 201, created.text
        instance_id = created.json()["instance_id"]
        for _ in range(6):  # and the /v1 routes, passed on between workers
            assert requests.get(f"{base}/v1/instances/{instance_id}/observation", timeout=10).status_code == 200
        assert requests.get(f"{base}/v1/health", timeout=10).json()["workers"][1]["status"] == "ok"
        if importlib.util.find_spec("openenv") is not None:  # OpenEnv's WebSocket sessions too
            from openenv.core.generic_client import GenericEnvClient

            for _ in range(3):
                with GenericEnvClient(base_url=base).sync() as env:
                    assert env.reset(task_id=1).observation["task_id"] == 1
            with pytest.raises(ConnectionError), GenericEnvClient(base_url=url).sync() as env:
                env.reset()
    finally:
        server.terminate()
        server.wait(timeout=30)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by its new parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_with_their_supervisor_even_after_kill_9():
    """Before: after `kill -9` of the parent its workers served on, unsupervised, and held the port."""
    server, url = _start_workers()
    port = int(url.rsplit(":", 1)[1])
    workers = [w["pid"] for w in requests.get(f"{url}/v1/health", timeout=10).json()["workers"]]
    assert all(_running(pid) for pid in workers)
    server.kill()
    server.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    still = [pid for pid in workers if _running(pid)]
    for pid in still:  # leave no server behind, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    assert not still, f"workers {still} outlived their supervisor by 30 s"
    check_port_free("127.0.0.1", port)  # what a new `agentgym serve --port` checks first: the port is free again


def test_openenv_and_mcp_sessions_work_across_workers(url):
    """OpenEnv's WebSocket sessions stay on the worker that accepted them; its shared HTTP episode lives
    in worker 0; an MCP step on a fresh connection reaches the worker of its episode."""
    pytest.importorskip("openenv")
    pytest.importorskip("mcp")
    import asyncio

    from mcp import Client
    from openenv.core.generic_client import GenericEnvClient

    for _ in range(4):  # fresh connections: sessions on both workers
        with GenericEnvClient(base_url=url).sync() as env:
            assert env.reset(task_id=2).observation["task_id"] == 2
            assert env.step({"action": "inventory"}).observation["text"].startswith("Inventory")
            assert env.state()["step_count"] == 1
    for _ in range(3):  # each request on a fresh connection, the episode in worker 0
        assert requests.post(f"{url}/reset", json={"task_id": 4}, timeout=10).status_code == 200
        step = requests.post(f"{url}/step", json={"action": {"action": "inventory"}}, timeout=10)
        assert step.status_code == 200 and step.json()["observation"]["task_id"] == 4, step.text
        assert requests.get(f"{url}/state", timeout=10).json()["step_count"] == 1

    async def call(tool: str, arguments: dict) -> dict:
        async with Client(f"{url}/mcp") as client:  # a client, and a connection, per call
            answer = await client.call_tool(tool, arguments)
            assert not answer.is_error, answer
            return answer.structured_content

    held: dict[int, int] = {}  # worker -> an episode it holds
    for _ in range(30):
        episode = asyncio.run(call("reset", {"task_id": 1}))["episode"]
        if held.setdefault(owner_of(episode, 2), episode) != episode:
            asyncio.run(call("close", {"episode": episode}))
        if len(held) == 2:
            break
    assert len(held) == 2, "30 MCP resets on fresh connections all landed on one worker"
    for episode in held.values():  # 2 steps each, on fresh connections: most reach the other worker once
        for _ in range(2):
            assert asyncio.run(call("step", {"episode": episode, "action": "inventory"}))["observation"].startswith(
                "Inventory")
        asyncio.run(call("close", {"episode": episode}))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_where_the_kernel_cannot_signal_it_a_worker_watches_its_supervisor_pid():
    """The fallback of systems without PR_SET_PDEATHSIG: a parent that runs a child which watches it."""
    child = ("import os, sys, time; from agentgym_core.http.workers import _end_with; linux = sys.platform; "
             "sys.platform = 'darwin'; _end_with(os.getppid()); sys.platform = linux; print('watching', flush=True); "
             "time.sleep(60)")
    parent = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
              "stdout=subprocess.PIPE, text=True); c.stdout.readline(); print(c.pid, flush=True); time.sleep(60)")
    supervisor = subprocess.Popen([sys.executable, "-c", parent, child], stdout=subprocess.PIPE, text=True)
    worker = int(supervisor.stdout.readline())
    assert _running(worker)
    supervisor.kill()
    supervisor.wait(timeout=10)
    deadline = time.monotonic() + 15
    while _running(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _running(worker):
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived its supervisor by 15 s")
