"""`agentgym serve --workers N`: instances stay on their worker, whatever connection a request uses."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from agentgym_core.instances import InstanceTable
from agentgym_core.workers import owner_of
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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([AGENTGYM, "serve", "textcraft", "--workers", "2", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=SERVER_ENV)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(server, base)
    except BaseException:
        server.terminate()  # its workers go with it
        server.wait(timeout=30)
        raise
    yield base
    server.terminate()
    assert server.wait(timeout=30) == 0
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass  # every worker is gone with the parent


def _wait_until_serving(server: subprocess.Popen, base: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        if server.poll() is not None:
            pytest.fail(f"server exited: {server.stderr.read()}")
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


def test_a_dead_worker_stops_the_whole_server():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([AGENTGYM, "serve", "textcraft", "--workers", "2", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=SERVER_ENV)
    try:
        assert f"with 2 workers on http://127.0.0.1:{port}" in server.stdout.readline()
        workers = []
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _worker_of(p, server.pid)]
            time.sleep(0.2)
        assert len(workers) == 2, "the two worker processes did not appear"
        os.kill(workers[0], 9)
        assert server.wait(timeout=60) == 1  # not a half-server whose other half's instances are gone
        assert not Path(f"/proc/{workers[1]}").exists()  # the other worker was stopped and reaped
    finally:
        if server.poll() is None:
            server.kill()


def _worker_of(proc: Path, parent: int) -> bool:
    try:
        fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]) == parent and b"spawn_main" in (proc / "cmdline").read_bytes()
    except (OSError, IndexError, ValueError):
        return False
