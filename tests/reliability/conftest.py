"""Helpers for the reliability suite: a real `agentgym serve` process that tests may kill or stop."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(env: str, port: int, *extra: str) -> subprocess.Popen:
    """`agentgym serve ENV` on loopback as its own process; returns once it answers /v1/health."""
    agentgym = Path(sys.executable).with_name("agentgym")
    environ = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    process = subprocess.Popen([str(agentgym), "serve", env, "--port", str(port), *extra], env=environ,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stderr.read()}")
        try:
            requests.get(f"http://127.0.0.1:{port}/v1/health", timeout=1)
            return process
        except requests.RequestException:
            time.sleep(0.1)
    process.kill()
    raise TimeoutError("the server did not answer within 60 s")


@pytest.fixture
def server_process():
    """``start(env, port=None)`` -> (process, port) starts a server (on a free port unless given);
    every one still running is killed at teardown."""
    started: list[subprocess.Popen] = []

    def start(env: str, port: int | None = None, *extra: str) -> tuple[subprocess.Popen, int]:
        port = port or free_port()
        process = start_server(env, port, *extra)
        started.append(process)
        return process, port

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
