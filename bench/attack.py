"""Attack an environment server with hostile requests on every face: no 5xx, no dropped connection.

The server runs as its own process (`agentgym serve ENV --token T`, once per --workers count); one
client sends, to each face (agentgym's /v1, AgentGym's compat routes where the environment has them,
OpenEnv's HTTP routes and WebSocket, MCP at /mcp), requests that a broken or hostile client could
send: bodies that are not JSON, not UTF-8, not objects, nested 100,000 deep, fields of the wrong
type, integers past 64 bits, lone surrogates, actions over the length limit, bodies past
--max-body-bytes (declared and chunked), a lying Content-Length, and a missing or wrong token. An
answer of 5xx, a dropped connection, or a server that cannot play an ordinary episode afterwards is
a failure; the script exits 1 and lists them. Answers of 2xx are listed too: some of these requests
are valid (OpenEnv's reset ignores unknown keys; AgentGym's routes answer errors as 200 with
``{"error": ...}``, as AgentGym's servers do).

    nice python bench/attack.py --env textcraft --workers 1 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

LIMIT = 65_536  # the servers' --max-body-bytes: small, so "too large" is cheap to send
ACTION = {"textcraft": "inventory", "babyai": "turn left", "guess": "guess 50"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree_rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` and its direct children (the `--workers` processes)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if int(entry.name) == pid or parent == pid:
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
    return total / 1024


def hostile_values() -> list[tuple[str, Any]]:
    return [("null", None), ("true", True), ("float", 1.9), ("negative", -1), ("2**64", 2**64),
            ("10**4000", "BIGINT"), ("empty string", ""), ("lone surrogate", "\ud800"),
            ("70k chars", "x" * 70_000), ("list", [1, 2]), ("object", {"a": 1}), ("NaN", "NAN")]


def encode(body: Any) -> bytes:
    """JSON bytes, with the two values json.dumps cannot write as a hostile client would."""
    text = json.dumps(body, allow_nan=True)
    return text.replace('"BIGINT"', "1" * 4000).replace('"NAN"', "NaN").encode("utf-8", "surrogatepass")


def raw_bodies() -> list[tuple[str, bytes]]:
    return [("empty", b""), ("not JSON", b"{not json"), ("truncated", b'{"id": 1, "act'),
            ("not UTF-8", b'{"action": "\xff\xfe"}'), ("UTF-16", '{"action": "x"}'.encode("utf-16")),
            ("deep array", b"[" * 100_000 + b"]" * 100_000), ("deep object", b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
            ("JSON string", b'"hello"'), ("JSON number", b"7"), ("JSON null", b"null"), ("JSON list", b"[]"),
            ("trailing garbage", b'{"action": "x"} {"action": "y"}'), ("bare NaN", b"NaN"),
            ("duplicate keys", b'{"id": 1, "id": "x", "action": 2}')]


class Attack:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.results: list[dict[str, Any]] = []

    def send(self, face: str, case: str, method: str, path: str, *, data: Any = None,
             headers: dict[str, str] | None = None, auth: bool = True, timeout: float = 60) -> int | str:
        session = self.session if auth else requests
        try:
            response = session.request(method, self.url + path, data=data, headers=headers, timeout=timeout)
            outcome: int | str = response.status_code
            outcome_text = response.text[:300] if response.status_code >= 500 else ""
        except requests.RequestException as exc:
            outcome, outcome_text = f"no answer: {type(exc).__name__}", str(exc)[:300]
        record = {"face": face, "case": case, "method": method, "path": path, "status": outcome,
                  **({"answer": outcome_text} if outcome_text else {})}
        if isinstance(outcome, int) and outcome < 300:  # AgentGym's routes and MCP answer errors 200 with a body
            record["error_in_body"] = '"error"' in response.text or '"isError":true' in response.text
        self.results.append(record)
        return outcome

    def raw(self, face: str, case: str, request: bytes, *, half_close: bool = False) -> int | str:
        """A request written byte by byte (for headers requests will not send). ``half_close`` ends the
        client's side after it: a server may then close without answering (the client left)."""
        host, port = self.url.removeprefix("http://").split(":")
        try:
            with socket.create_connection((host, int(port)), timeout=40) as sock:
                sock.sendall(request)
                if half_close:
                    sock.shutdown(socket.SHUT_WR)
                answer = b""
                while b"\r\n" not in answer:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
            if answer.startswith(b"HTTP/1.1 "):
                status: int | str = int(answer.split(b" ", 2)[1])
            else:
                status = "closed" if half_close and not answer else f"no answer: {answer[:40]!r}"
        except (OSError, ValueError) as exc:
            status = f"no answer: {type(exc).__name__}"
        self.results.append({"face": face, "case": case, "method": "raw", "path": request.split(b" ", 2)[1].decode(),
                             "status": status})
        return status

    def json_post(self, face: str, case: str, path: str, body: Any) -> int | str:
        return self.send(face, case, "POST", path, data=encode(body), headers={"Content-Type": "application/json"})


def attack_posts(attack: Attack, face: str, path: str, template: dict[str, Any]) -> None:
    """Raw hostile bodies, then ``template`` with each field set to each hostile value."""
    for case, body in raw_bodies():
        attack.send(face, case, "POST", path, data=body, headers={"Content-Type": "application/json"})
    for field in template:
        for case, value in hostile_values():
            attack.json_post(face, f"{field}={case}", path, {**template, field: value})
    attack.json_post(face, "unknown field", path, {**template, "surprise": [1, 2, 3]})
    attack.send(face, "too large (declared)", "POST", path, data=b" " * (LIMIT + 1),
                headers={"Content-Type": "application/json"})
    attack.send(face, "too large (chunked)", "POST", path, data=iter([b" " * 8192] * (LIMIT // 8192 + 2)),
                headers={"Content-Type": "application/json"})
    attack.send(face, "form body", "POST", path, data={"action": "x"})
    attack.send(face, "no token", "POST", path, data=encode(template), auth=False)
    attack.send(face, "wrong token", "POST", path, data=encode(template),
                headers={"Authorization": "Bearer " + "0" * len(attack.token)})
    host = attack.url.removeprefix("http://")
    body = encode(template)
    attack.raw(face, "Content-Length longer than the body", (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {attack.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body) + 100}\r\nConnection: close\r\n\r\n"
    ).encode() + body, half_close=True)
    attack.raw(face, "Content-Length not a number", (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {attack.token}\r\n"
        "Content-Length: lots\r\nConnection: close\r\n\r\n").encode() + body)


def attack_gets(attack: Attack, face: str, path: str) -> None:
    attack.send(face, "no token", "GET", path, auth=False)
    attack.send(face, "wrong token", "GET", path, headers={"Authorization": "Bearer wrong"})
    attack.send(face, "body on GET", "GET", path, data=b"{not json")
    attack.send(face, "wrong method", "DELETE", path)


def attack_websocket(url: str, token: str) -> list[dict[str, Any]]:
    """Hostile OpenEnv WebSocket messages: each must get an error message on a connection that stays open."""
    try:
        from websockets.sync.client import connect
    except ImportError:
        return [{"face": "openenv-ws", "case": "skipped: pip install websockets", "status": "skipped"}]
    results = []
    messages = [("not JSON", "{not json"), ("a list", "[]"), ("no type", "{}"), ("unknown type", '{"type": "x"}'),
                ("step before reset", '{"type": "step", "data": {"action": "x"}}'),
                ("reset with wrong types", '{"type": "reset", "data": {"seed": "x", "task_id": [1]}}'),
                ("deep nesting", "[" * 100_000 + "]" * 100_000),
                ("over the limit", json.dumps({"type": "step", "data": {"action": "x" * (LIMIT + 1)}})),
                ("lone surrogate action", '{"type": "step", "data": {"action": "\\ud800"}}'),
                ("action of wrong type", '{"type": "step", "data": {"action": 7}}')]
    ws_url = url.replace("http://", "ws://") + "/ws"
    try:
        with connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None,
                     open_timeout=30) as ws:
            for case, message in messages:
                ws.send(message)
                answer = json.loads(ws.recv(timeout=60))
                results.append({"face": "openenv-ws", "case": case, "status": answer.get("type"),
                                "code": answer.get("data", {}).get("code")})
            ws.send('{"type": "reset", "data": {}}')
            answer = json.loads(ws.recv(timeout=60))
            results.append({"face": "openenv-ws", "case": "ordinary reset after the attack", "status": answer["type"]})
    except Exception as exc:  # the connection dropped: a failure
        results.append({"face": "openenv-ws", "case": "connection", "status": f"no answer: {exc!r}"[:300]})
    try:
        with connect(ws_url, open_timeout=30):
            results.append({"face": "openenv-ws", "case": "no token", "status": "accepted"})
    except Exception as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        results.append({"face": "openenv-ws", "case": "no token", "status": status or f"refused: {exc!r}"[:200]})
    return results


def attack_server(attack: Attack, env: str) -> None:
    url = attack.url
    # /v1: agentgym's own protocol.
    created = attack.session.post(f"{url}/v1/instances", json={}, timeout=60).json()["instance_id"]
    attack_posts(attack, "v1", "/v1/instances", {"task_id": 0, "seed": 1, "request_id": "r"})
    attack_posts(attack, "v1", f"/v1/instances/{created}/reset", {"task_id": 0, "seed": 1})
    attack_posts(attack, "v1", f"/v1/instances/{created}/step", {"action": ACTION.get(env, "look")})
    attack_posts(attack, "v1", "/v1/step_batch", {"steps": [{"instance_id": created, "action": "x"}]})
    attack_posts(attack, "v1", "/v1/parse_action", {"text": "x"})
    for bad_id in ("-1", "x", "1" * 400, "1.5", "%00", "9" * 30):
        attack.json_post("v1", f"instance id {bad_id[:12]}", f"/v1/instances/{bad_id}/step", {"action": "x"})
        attack.send("v1", f"instance id {bad_id[:12]}", "GET", f"/v1/instances/{bad_id}/observation")
        attack.send("v1", f"instance id {bad_id[:12]}", "DELETE", f"/v1/instances/{bad_id}")
    for path in ("/v1/health", "/v1/info", "/v1/tasks", f"/v1/instances/{created}/observation"):
        attack_gets(attack, "v1", path)
    # AgentGym's compat routes (where the environment has them).
    if attack.session.post(f"{url}/create", json={}, timeout=60).status_code != 404:
        compat = attack.session.post(f"{url}/create", json={}, timeout=60).json()
        compat_id = compat.get("id", compat.get("env_idx")) if isinstance(compat, dict) else compat
        attack_posts(attack, "compat", "/create", {"id": 0})
        attack_posts(attack, "compat", "/step", {"id": compat_id, "action": ACTION.get(env, "look")})
        attack_posts(attack, "compat", "/reset", {"id": compat_id, "data_idx": 0})
        attack_posts(attack, "compat", "/close", {"id": compat_id})
        for query in ("", "?id=x", "?id=1&id=2", "?id=" + "9" * 400, f"?id={compat_id}"):
            attack.send("compat", f"observation {query[:12]}", "GET", f"/observation{query}")
    # OpenEnv's HTTP routes.
    attack.json_post("openenv", "ordinary reset", "/reset", {})
    attack_posts(attack, "openenv", "/reset", {"seed": 1, "episode_id": "e", "task_id": 0, "split": "train"})
    attack_posts(attack, "openenv", "/step", {"action": {"action": ACTION.get(env, "look")}})
    attack.json_post("openenv", "action of wrong type inside", "/step", {"action": {"action": 7}})
    attack.json_post("openenv", "action too long inside", "/step", {"action": {"action": "x" * 70_000}})
    attack.json_post("openenv", "lone surrogate inside", "/step", {"action": {"action": "\ud800"}})
    for path in ("/state", "/schema", "/metadata", "/health"):
        attack_gets(attack, "openenv", path)
    # MCP (JSON-RPC over streamable HTTP).
    mcp_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def rpc(case: str, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else encode(payload)
        attack.send("mcp", case, "POST", "/mcp", data=data, headers=headers or mcp_headers)

    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    for case, body in raw_bodies():
        rpc(case, body)
    rpc("unknown method", {"jsonrpc": "2.0", "id": 1, "method": "nope"})
    rpc("no jsonrpc", {"id": 1, "method": "tools/list"})
    rpc("params of wrong type", {**call, "params": [1, 2]})
    rpc("unknown tool", {**call, "params": {"name": "nope", "arguments": {}}})
    for case, value in hostile_values():
        rpc(f"step episode={case}", {**call, "params": {"name": "step", "arguments": {"episode": value, "action": "x"}}})
        rpc(f"step action={case}", {**call, "params": {"name": "step", "arguments": {"episode": 1, "action": value}}})
        rpc(f"reset task_id={case}", {**call, "params": {"name": "reset", "arguments": {"task_id": value}}})
        rpc(f"arguments={case}", {**call, "params": {"name": "reset", "arguments": value}})
    rpc("batch of 1,000 calls", [{"jsonrpc": "2.0", "id": i, "method": "tools/list"} for i in range(1000)])
    rpc("no Accept header", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"Content-Type": "application/json"})
    rpc("text/plain", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"Content-Type": "text/plain", "Accept": "application/json, text/event-stream"})
    attack.send("mcp", "too large (declared)", "POST", "/mcp", data=b" " * (LIMIT + 1), headers=mcp_headers)
    attack.send("mcp", "too large (chunked)", "POST", "/mcp", data=iter([b" " * 8192] * (LIMIT // 8192 + 2)),
                headers=mcp_headers)
    attack.send("mcp", "no token", "POST", "/mcp", data=encode({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
                headers=mcp_headers, auth=False)
    attack.send("mcp", "wrong token", "POST", "/mcp", data=b"{}", headers={**mcp_headers, "Authorization": "Bearer x"})
    attack.send("mcp", "GET", "GET", "/mcp", headers=mcp_headers)
    attack.send("mcp", "DELETE", "DELETE", "/mcp", headers=mcp_headers)
    # Unknown paths, path tricks, the token in the path.
    for path in ("/nope", "/v1/../v1/health", "/v1/instances/", "/token/wrong/v1/health", "/token//v1/health",
                 "/%ff", "/" + "a" * 8000):
        attack.send("paths", path[:30], "GET", path)


def still_serves(url: str, token: str, env: str) -> bool:
    """An ordinary /v1 episode and an OpenEnv reset and step still work."""
    headers = {"Authorization": f"Bearer {token}"}
    try:
        created = requests.post(f"{url}/v1/instances", json={"task_id": None}, headers=headers, timeout=60)
        instance = created.json()["instance_id"]
        tasks = requests.get(f"{url}/v1/tasks", headers=headers, timeout=60).json()
        task = next(ids[0] for ids in tasks["splits"].values() if ids)
        ok = requests.post(f"{url}/v1/instances/{instance}/reset", json={"task_id": task}, headers=headers,
                           timeout=60).status_code == 200
        ok &= requests.post(f"{url}/v1/instances/{instance}/step", json={"action": ACTION.get(env, "look")},
                            headers=headers, timeout=60).status_code == 200
        ok &= requests.delete(f"{url}/v1/instances/{instance}", headers=headers, timeout=60).status_code == 200
        ok &= requests.post(f"{url}/reset", json={}, headers=headers, timeout=60).status_code == 200
        ok &= requests.post(f"{url}/step", json={"action": {"action": ACTION.get(env, "look")}}, headers=headers,
                            timeout=60).status_code == 200
        return bool(ok)
    except (requests.RequestException, KeyError, ValueError, StopIteration):
        return False


@contextlib.contextmanager
def server(env: str, workers: int, token: str, ready_timeout: float) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    agentgym = Path(sys.executable).with_name("agentgym")
    process = subprocess.Popen([str(agentgym), "serve", env, "--port", str(port), "--workers", str(workers),
                                "--max-body-bytes", str(LIMIT)], env={**os.environ, "AGENTGYM_TOKEN": token},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                sys.exit(f"the server exited with status {process.returncode}: {process.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/v1/health", headers={"Authorization": f"Bearer {token}"},
                                timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                sys.exit(f"the server did not answer /v1/health within {ready_timeout:.0f} s")
            time.sleep(0.2)
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="textcraft")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="`agentgym serve --workers` counts")
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    parser.add_argument("--out", default="bench/results/attack_{env}.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs, failures = [], []
    for workers in args.workers:
        token = secrets.token_hex(16)
        with server(args.env, workers, token, args.ready_timeout) as (url, process):
            attack = Attack(url, token)
            rss_before = tree_rss_mb(process.pid)
            started = time.monotonic()
            attack_server(attack, args.env)
            attack.results.extend(attack_websocket(url, token))
            seconds = time.monotonic() - started
            alive = process.poll() is None and still_serves(url, token, args.env)
            rss_after = tree_rss_mb(process.pid)
        # A 5xx or a dropped connection fails; a 2xx is listed for a reader to judge (a hostile-looking
        # request can be valid: an OpenEnv reset ignores unknown keys, AgentGym's routes answer errors 200).
        bad = [r for r in attack.results if r["face"] != "openenv-ws"
               and not (r["status"] == "closed" or (isinstance(r["status"], int) and r["status"] < 500))]
        bad += [r for r in attack.results if r["face"] == "openenv-ws" and r["case"] != "no token"
                and r["status"] not in ("error", "observation", "skipped")]
        bad += [r for r in attack.results if r["face"] == "openenv-ws" and r["case"] == "no token"
                and r["status"] == "accepted"]
        accepted = [f"{r['face']} {r['method']} {r['path'][:40]} {r['case']}" for r in attack.results
                    if isinstance(r["status"], int) and r["status"] < 400 and not r.get("error_in_body")]
        if not alive:
            bad.append({"face": "server", "case": "an ordinary episode after the attack", "status": "failed"})
        statuses = Counter(str(r["status"]) for r in attack.results)
        run = {"workers": workers, "requests": len(attack.results), "seconds": round(seconds, 1),
               "statuses": dict(sorted(statuses.items())),
               "by_face": {face: len([r for r in attack.results if r["face"] == face])
                           for face in dict.fromkeys(r["face"] for r in attack.results)},
               "failures": bad, "answered_2xx_without_error": accepted, "still_serves": alive,
               "rss_mb": {"before": round(rss_before, 1), "after": round(rss_after, 1)}, "results": attack.results}
        runs.append(run)
        failures += bad
        print(f"--workers {workers}: {len(attack.results)} hostile requests in {seconds:.0f} s, "
              f"answers {dict(sorted(statuses.items()))}; failures {len(bad)}; 2xx without an error {len(accepted)}; "
              f"still serves: {alive}; "
              f"RSS {rss_before:.1f} -> {rss_after:.1f} MB", flush=True)
        for failure in bad:
            print(f"  FAIL {failure}", flush=True)
    out = Path(args.out.format(env=args.env))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"env": args.env, "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                               "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
                               "max_body_bytes": LIMIT, "runs": runs}, indent=2))
    print(f"wrote {out}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
