"""Helpers for the reliability suite: a real `agentgym serve` process that tests may kill or stop."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
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
    # A file, not a pipe: a server that logs more than a pipe holds (tracebacks of fuzzed requests)
    # would block on its next write, and its supervisor would take it for hung.
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - open as long as the server runs
    process = subprocess.Popen([str(agentgym), "serve", env, "--port", str(port), *extra], env=environ,
                               stdout=subprocess.DEVNULL, stderr=log, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"the server exited: {log.read()[-3000:]}")
        try:
            requests.get(f"http://127.0.0.1:{port}/v1/health", timeout=1)
            return process
        except requests.RequestException:
            time.sleep(0.1)
    process.kill()
    raise TimeoutError("the server did not answer within 120 s")


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


@pytest.fixture(scope="session")
def textcraft_workers_url():
    """``agentgym serve textcraft --workers 2`` on loopback, shared by the suite's bad-input tests, so
    they also run through the worker front (which reads bodies and ids before any worker does)."""
    port = free_port()
    process = start_server("textcraft", port, "--workers", "2", "--max-instances", "64")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
