"""A server killed and restarted mid-rollout, and a hung server: clients fail loudly and in time."""

from __future__ import annotations

import os
import signal
import time

import pytest

from agentgym_core.env import EnvError
from agentgym_core.http.client import EnvClient, HTTPEnv, RemoteError


def test_rollouts_across_a_kill_and_restart_fail_loudly_never_silently(server_process):
    server, port = server_process("guess")
    url = f"http://127.0.0.1:{port}"
    client = EnvClient(url, timeout=5, retries=2)
    envs = [HTTPEnv(client=client) for _ in range(6)]
    for task, env in enumerate(envs):
        env.reset(task)
        env.step("guess 50")

    server.kill()  # kill -9 mid-rollout
    server.wait(timeout=10)
    server_process("guess", port)  # a new server on the same address

    failed, wrong = 0, 0
    for env in envs:
        try:
            env.step("guess 25")
            wrong += 1  # an old id answered as if nothing happened: silent wrong data
        except RemoteError as exc:
            assert exc.status == 404 and exc.code == "unknown_instance", exc
            failed += 1
    assert (failed, wrong) == (len(envs), 0)
    fresh = HTTPEnv(client=client)
    assert fresh.reset(3).observation.startswith("Guess")  # the restarted server serves new rollouts
    fresh.close()
    client.close()


def test_a_hung_server_makes_the_client_give_up_within_its_timeout(server_process):
    server, port = server_process("guess")
    env = HTTPEnv(client=EnvClient(f"http://127.0.0.1:{port}", timeout=1.0, retries=1))
    env.reset(1)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(EnvError, match="cannot reach"):
            env.step("guess 50")  # a step is never retried once it may have reached the server
        assert time.monotonic() - start < 2.5
        other = HTTPEnv(client=EnvClient(f"http://127.0.0.1:{port}", timeout=1.0, retries=1))
        start = time.monotonic()
        with pytest.raises(EnvError, match="cannot reach"):
            other.reset(2)  # create is retried once (safe: it carries a request id), then gives up
        assert time.monotonic() - start < 4.5
    finally:
        os.kill(server.pid, signal.SIGCONT)
