"""Schema-driven fuzzing of every route of every environment server, from its OpenAPI description.

For each route the OpenAPI page lists, requests are generated from its schema: conforming bodies
and path parameters, then the same with one field mutated to a hostile value (wrong type, huge or
negative numbers, lone surrogates, deep nesting, over-long text). The server must never answer 5xx,
and every 4xx must carry the protocol's error shape (AgentGym's compat routes: HTTP 200 with
``{"error": str}``). A seeded RNG keeps it reproducible and bounded (well under a minute).
"""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import pytest
import requests

from agentgym_core.http.compat import AgentGymCompat
from agentgym_core.http.serving import serve_env
from agentgym_env_babyai import BabyAIEnv
from agentgym_env_guess import GuessEnv
from agentgym_env_textcraft import TextCraftEnv

EXAMPLES_PER_ROUTE = 24

HOSTILE: list[Any] = [None, True, 1.9, -1, 0, 2**53, 10**40, "", "\ud800", "x" * 70_000, [], {}, [[[[[]]]]],
                      "Infinity", {"a": [1, {"b": None}]}]


class CompatGuessEnv(GuessEnv):
    agentgym_compat = AgentGymCompat()


def resolve(schema: dict, spec: dict) -> dict:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def conforming(schema: dict, spec: dict, rng: random.Random, depth: int = 0) -> Any:
    """A value the schema accepts (roughly: within its types and bounds)."""
    schema = resolve(schema, spec)
    if "anyOf" in schema:
        return conforming(rng.choice(schema["anyOf"]), spec, rng, depth)
    kind = schema.get("type")
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -5) + 1 if "exclusiveMinimum" in schema else -5)
        high = schema.get("maximum", 2000)
        return rng.randint(int(low), int(min(high, low + 2000)))
    if kind == "number":
        return rng.uniform(-10, 10)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        length = rng.randint(schema.get("minLength", 0), min(schema.get("maxLength", 40), 40))
        return "".join(rng.choice("abc xyz123") for _ in range(length))
    if kind == "array":
        return [conforming(schema.get("items", {}), spec, rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return {name: conforming(sub, spec, rng, depth + 1) for name, sub in props.items()
                if name in required or rng.random() < 0.7}
    if kind == "null":
        return None
    return rng.choice([1, "a", None])


def mutated(value: Any, rng: random.Random) -> Any:
    """``value`` with one field (or the whole body) replaced by a hostile value."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(sorted(value))
        return {**value, key: rng.choice(HOSTILE)}
    if isinstance(value, dict) and rng.random() < 0.5:
        return {**value, "unexpected_field": 1}
    return rng.choice(HOSTILE)


def routes(spec: dict) -> list[tuple[str, str, dict]]:
    return [(method.upper(), path, operation) for path, item in spec["paths"].items()
            for method, operation in item.items()]


def check_answer(response: requests.Response, compat: bool, what: str) -> None:
    assert response.status_code < 500, f"{what} -> {response.status_code}: {response.text[:300]}"
    if compat and response.status_code == 200:
        return  # a payload, or AgentGym's {"error": str}
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error"} and isinstance(body["error"]["code"], str), f"{what} -> {body}"


@pytest.mark.parametrize("env_cls", [CompatGuessEnv, BabyAIEnv, TextCraftEnv, "textcraft --workers 2"],
                         ids=lambda c: getattr(c, "name", c))
def test_every_route_survives_generated_requests(env_cls, request):
    rng = random.Random(20)
    if isinstance(env_cls, str):  # a real `agentgym serve --workers 2`: requests cross its worker front
        server = contextlib.nullcontext(request.getfixturevalue("textcraft_workers_url"))
    else:
        server = serve_env(env_cls, max_instances=64)
    with server as url:
        spec = requests.get(f"{url}/openapi.json", timeout=10).json()
        session = requests.Session()
        live = session.post(f"{url}/v1/instances", json={"task_id": 0}, timeout=10).json()["instance_id"]
        compat_id = session.post(f"{url}/create", json={}, timeout=10).json().get("id", live)
        found = routes(spec)
        assert len(found) >= 11  # every /v1 route (and the compat ones) is described
        for method, path, operation in found:
            compat = "agentgym-compat" in operation.get("tags", [])
            body_schema = (operation.get("requestBody", {}).get("content", {}).get("application/json", {})
                           .get("schema"))
            for example in range(EXAMPLES_PER_ROUTE):
                hostile = example % 2 == 1
                params = {}
                for param in operation.get("parameters", []):
                    value = conforming(param.get("schema", {}), spec, rng)
                    if param["name"] == "instance_id" and rng.random() < 0.5:
                        value = live
                    params[param["name"]] = rng.choice(HOSTILE[:8]) if hostile and rng.random() < 0.5 else value
                target = path
                for name, value in params.items():
                    target = target.replace("{" + name + "}", str(value))
                if compat:  # the compat routes read raw bodies; their fields are AgentGym's
                    body: Any = {"id": rng.choice([compat_id, live, 1]), "data_idx": rng.randint(0, 50),
                                 "action": rng.choice(["turn left", "inventory", "guess 3", "look"])}
                elif body_schema is not None:
                    body = conforming(body_schema, spec, rng)
                else:
                    body = None
                if hostile and body is not None:
                    body = mutated(body, rng)
                query = {"id": compat_id} if compat and method == "GET" else None
                data = None if body is None else json.dumps(body).encode("utf-8", "surrogatepass")
                response = session.request(method, f"{url}{target}", data=data, params=query, timeout=20,
                                           headers={"content-type": "application/json"})
                check_answer(response, compat, f"{method} {target} {str(body)[:200]}")
        # After all that, the server still works and holds no more than what was created.
        health = session.get(f"{url}/v1/health", timeout=10).json()
        assert health["status"] == "ok" and health["live_instances"] <= health["max_instances"]
