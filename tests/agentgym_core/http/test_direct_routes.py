"""Raw-request routes called directly (agentgym_core.http.direct_routes): same answers, same limits."""

from __future__ import annotations

import json
from typing import Any

import requests
from fastapi import FastAPI, Request

from agentgym_core.http.compat import AgentGymCompat, add_agentgym_routes
from agentgym_core.http.direct_routes import DirectRouteApp
from agentgym_core.http.errors import error_status
from agentgym_core.http.instances import InstanceTable
from agentgym_core.http.server import create_app
from agentgym_core.http.serving import serve_app
from agentgym_core.testing import serve_env
from agentgym_env_guess import GuessEnv


class CompatGuessEnv(GuessEnv):
    agentgym_compat = AgentGymCompat()


def test_only_the_raw_request_routes_are_direct():
    app = create_app(CompatGuessEnv)
    direct = app.enable_direct_routes(max_body_bytes=4096)
    assert direct == ["GET /observation", "POST /close", "POST /create", "POST /reset", "POST /step"]
    plain = create_app(GuessEnv)  # no compat routes: only OpenEnv's raw-request routes are direct
    assert plain.enable_direct_routes(max_body_bytes=4096) == ["POST /reset", "POST /step"]


def _routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route in the router's order (WebSocket routes as ``WS``)."""
    return [(method, route.path) for route in app.router.routes
            for method in sorted(getattr(route, "methods", None) or {"WS"}) if method != "HEAD"]


def test_one_route_per_method_and_path_and_v1_is_tried_first():
    # The router takes the first match and a direct route beats every other one: two routes for one
    # method and path would leave one of them unreachable. /v1 goes through the router (its routes
    # have path parameters), so it comes before the faces that do not.
    for env_cls in (CompatGuessEnv, GuessEnv):
        routes = [r for r in _routes(create_app(env_cls)) if not r[1].startswith(("/docs", "/redoc", "/openapi"))]
        assert len(routes) == len(set(routes)), sorted(r for r in routes if routes.count(r) > 1)
        paths = [path for _, path in routes]
        last_v1 = max(i for i, path in enumerate(paths) if path.startswith("/v1/"))
        first_face = min(paths.index(path) for path in ("/reset", "/step", "/state", "/ws"))
        assert last_v1 < first_face, paths


def _episode(url: str) -> list[tuple[int, str, object]]:
    """A compat episode with good and bad requests: (status, content-type, answer without ids)."""
    answers = []
    created = requests.post(f"{url}/create", json={}, timeout=10)
    instance = created.json()["id"]

    def record(response: requests.Response) -> None:
        # Instance ids are random per server: compare the answers with the id written as 0.
        body = json.loads(response.text.replace(str(instance), "0"))
        answers.append((response.status_code, response.headers["content-type"], body))

    record(created)
    record(requests.post(f"{url}/reset", json={"id": instance, "data_idx": 3}, timeout=10))
    for action in ("guess 50", "guess 25", "nonsense", 7):
        record(requests.post(f"{url}/step", json={"id": instance, "action": action}, timeout=10))
    record(requests.get(f"{url}/observation", params={"id": instance}, timeout=10))
    record(requests.post(f"{url}/step", data=b"{not json", timeout=10))
    record(requests.post(f"{url}/close", json={"id": instance}, timeout=10))
    record(requests.post(f"{url}/close", json={"id": instance}, timeout=10))
    return answers


def test_direct_answers_match_fastapi_answers():
    with serve_env(CompatGuessEnv) as url:
        direct = _episode(url)
    plain = FastAPI()  # the same compat routes, served by FastAPI's own stack
    table = InstanceTable(CompatGuessEnv, max_instances=8, idle_ttl_s=None)
    add_agentgym_routes(plain, table, CompatGuessEnv)
    plain.state.env_name = "guess"
    with serve_app(plain) as url:
        through_fastapi = _episode(url)
    assert direct == through_fastapi
    assert any("error" in body for _, _, body in direct if isinstance(body, dict))


def test_direct_routes_keep_the_body_limit():
    with serve_env(CompatGuessEnv, max_body_bytes=1024) as url:
        big = {"id": 1, "action": "x" * 2000}
        declared = requests.post(f"{url}/step", json=big, timeout=10)
        streamed = requests.post(f"{url}/step", data=iter([b'{"id": 1, "action": "', b"x" * 2000, b'"}']),
                                 timeout=10)
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "body_too_large"


def test_an_endpoint_that_raises_gets_the_apps_error_handler():
    app = DirectRouteApp()

    @app.post("/boom")
    async def boom(request: Request) -> Any:
        raise RuntimeError("the handler broke")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        from fastapi.responses import JSONResponse

        error = error_status(exc)
        return JSONResponse(error.body(), status_code=error.status)

    assert app.enable_direct_routes(max_body_bytes=4096) == ["POST /boom"]
    with serve_app(app) as url:
        response = requests.post(f"{url}/boom", json={}, timeout=10)
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "env_error"
    assert "the handler broke" in response.json()["error"]["message"]
