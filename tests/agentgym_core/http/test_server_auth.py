"""A shared token on environment and model servers (issue 40, 9), over loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from agentgym_core.http.auth import TOKEN_ENV, bearer_matches, resolve_token
from agentgym_core.http.client import EnvClient, HTTPEnv, RemoteError
from agentgym_core.http.compat import AgentGymCompat
from agentgym_core.http.pool import EnvPool
from agentgym_core.testing import serve_env, start_server_process
from agentgym_env_guess import GuessEnv

TOKEN = "s3cret-token-for-tests"
AGENTGYM = str(Path(sys.executable).with_name("agentgym"))


class CompatGuessEnv(GuessEnv):
    agentgym_compat = AgentGymCompat()


@pytest.fixture(scope="module")
def url():
    with serve_env(CompatGuessEnv, token=TOKEN) as base:
        yield base


def test_every_route_needs_the_token(url):
    for method, path in (("GET", "/v1/health"), ("GET", "/v1/tasks"), ("POST", "/v1/instances"),
                         ("POST", "/v1/step_batch"), ("GET", "/docs"), ("GET", "/openapi.json"),
                         ("POST", "/create"), ("POST", "/step"), ("GET", "/observation?id=1"), ("POST", "/close")):
        for headers in ({}, {"Authorization": "Bearer wrong-token-123"}, {"Authorization": TOKEN}):
            answer = requests.request(method, f"{url}{path}", json={}, headers=headers, timeout=10)
            assert answer.status_code == 401, (method, path, headers, answer.text)
            assert answer.json()["error"]["code"] == "unauthorized"
    assert "no token was sent" in requests.get(f"{url}/v1/health", timeout=10).json()["error"]["message"]


def test_the_token_as_a_header_or_as_a_path_prefix(url):
    ok = requests.get(f"{url}/v1/health", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert ok.status_code == 200 and ok.json()["env"] == "guess"
    # AgentGym's clients take a base URL and cannot add headers: the token goes in the base.
    base = f"{url}/token/{TOKEN}"
    instance_id = requests.post(f"{base}/create", json={}, timeout=10).json()["id"]
    reset = requests.post(f"{base}/reset", json={"id": instance_id, "data_idx": 3}, timeout=10).json()
    assert "secret integer" in reset["observation"] or reset["observation"]
    assert "error" not in requests.post(f"{base}/step", json={"id": instance_id, "action": "guess 5"}, timeout=10).json()
    assert requests.get(f"{base}/v1/health", timeout=10).status_code == 200
    assert requests.post(f"{url}/token/not-{TOKEN}/create", json={}, timeout=10).status_code == 401
    assert requests.post(f"{base}/close", json={"id": instance_id}, timeout=10).json() == {"id": instance_id,
                                                                                          "closed": True}


def test_the_bearer_scheme_is_read_in_any_case(url):
    # RFC 9110: an auth scheme is case-insensitive; some HTTP clients send "bearer".
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        for spaces in (" ", "  "):
            answer = requests.get(f"{url}/v1/health", headers={"Authorization": f"{scheme}{spaces}{TOKEN}"},
                                  timeout=10)
            assert answer.status_code == 200, (scheme, spaces, answer.text)
    # Whitespace after the token is not part of the header's value (RFC 9110, section 5.5), so "Bearer TOKEN "
    # is the token, whether or not the HTTP parser stripped it; a character more or less is not.
    answer = requests.get(f"{url}/v1/health", headers={"Authorization": f"Bearer {TOKEN} "}, timeout=10)
    assert answer.status_code == 200, answer.text
    assert bearer_matches(f"bearer  {TOKEN} \t".encode(), TOKEN)  # the check itself, on an unstripped value
    for wrong in (f"Basic {TOKEN}", f"Bearer{TOKEN}", f"Bearer {TOKEN.upper()}", f"Bearer {TOKEN}x",
                  f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN} x"):
        assert requests.get(f"{url}/v1/health", headers={"Authorization": wrong}, timeout=10).status_code == 401
        assert not bearer_matches(wrong.encode(), TOKEN), wrong


def test_clients_and_pools_send_the_token(url, monkeypatch):
    env = HTTPEnv(url, token=TOKEN)
    try:
        assert env.reset(905).observation
    finally:
        env.close()
    with pytest.raises(RemoteError, match=f"set \\${TOKEN_ENV}"):
        EnvClient(url).health()
    monkeypatch.setenv(TOKEN_ENV, TOKEN)  # what the trainer and `agentgym eval --env-url` read
    assert EnvClient(url).health().env == "guess"
    pool = EnvPool([url], env="guess")
    try:
        assert pool.check().split("test")
        pooled = pool.make_env()
        pooled.reset(905)
        assert pooled.step("guess 50").observation
        pooled.close()
    finally:
        pool.close()


def test_bad_tokens_are_refused_with_a_way_out():
    for bad in ("short", "has space x", "with/slash-1", "per%cent-11"):
        with pytest.raises(ValueError, match="at least 8 printable ASCII"):
            resolve_token(bad)


def test_a_token_file_keeps_the_token_off_the_command_line(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    assert resolve_token(None, file=token_file) == TOKEN
    for content, problem in (("", "is empty"), ("short\n", "at least 8 printable ASCII")):
        token_file.write_text(content)
        with pytest.raises(ValueError, match=problem):
            resolve_token(None, file=token_file)
    with pytest.raises(ValueError, match="cannot read the token file"):
        resolve_token(None, file=tmp_path / "missing")
    with pytest.raises(ValueError, match="not both"):
        resolve_token(TOKEN, file=token_file)


def test_serve_reads_its_token_from_a_file_and_its_help_steers_off_the_command_line(tmp_path):
    help_text = " ".join(subprocess.run([AGENTGYM, "serve", "--help"], capture_output=True, text=True,
                                        timeout=60).stdout.split())
    assert "can read it in `ps`: set $AGENTGYM_TOKEN or use --token-file instead" in help_text
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    # A separate `agentgym serve` process: it loads the installed plugins (the suite switches autoload off).
    environ = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD")}
    server, url = start_server_process([AGENTGYM, "serve", "guess", "--port", "0", "--token-file", str(token_file)],
                                       env=environ)
    try:
        answer = requests.get(f"{url}/v1/health", timeout=10)  # it prints its address once it listens
        assert answer.status_code == 401
        assert requests.get(f"{url}/v1/health", headers={"Authorization": f"Bearer {TOKEN}"},
                            timeout=10).status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert TOKEN not in " ".join(server.args)
