"""Helpers for the reliability suite: a real `agentgym serve` process that tests may kill or stop."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from agentgym_core.testing import start_server_process


def start_server(env: str, port: int = 0, *extra: str) -> tuple[subprocess.Popen, int]:
    """`agentgym serve ENV` on loopback as its own process (on a free port it binds itself unless ``port`` is
    given); returns (process, port) once it answers /v1/health."""
    agentgym = Path(sys.executable).with_name("agentgym")
    environ = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    process, url = start_server_process([str(agentgym), "serve", env, "--port", str(port), *extra], env=environ)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # listening since it printed the address; its app answers once started
        try:
            requests.get(f"{url}/v1/health", timeout=1)
            return process, int(url.rsplit(":", 1)[1])
        except requests.RequestException:
            assert process.poll() is None, f"the server exited with code {process.returncode}"
            time.sleep(0.1)
    process.kill()
    raise TimeoutError("the server did not answer within 120 s")


@pytest.fixture
def server_process():
    """``start(env, port=0)`` -> (process, port) starts a server (on a free port it binds itself unless given);
    every one still running is killed at teardown."""
    started: list[subprocess.Popen] = []

    def start(env: str, port: int = 0, *extra: str) -> tuple[subprocess.Popen, int]:
        process, port = start_server(env, port, *extra)
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
    process, port = start_server("textcraft", 0, "--workers", "2", "--max-instances", "64")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
