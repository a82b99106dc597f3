"""The environment's actions as MCP tools on every server (issue 49), played with the ``mcp`` SDK's
client over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import sys

import pytest

pytest.importorskip("mcp")
pytest.importorskip("agentgym_env_babyai")

from mcp import Client  # noqa: E402 - after the skip

from agentgym_core.testing import serve_env  # noqa: E402
from agentgym_env_babyai.env import BabyAIEnv  # noqa: E402
from agentgym_env_babyai.expert import solve  # noqa: E402

TASK = 3


@pytest.fixture(scope="module")
def url():
    with serve_env(BabyAIEnv) as base:
        yield base


def test_an_mcp_client_lists_the_tools_and_plays_a_babyai_episode(url):
    local = BabyAIEnv()
    first = local.reset(TASK).observation
    played = solve(local, TASK)
    local.close()
    assert played.success

    async def play() -> None:
        async with Client(f"{url}/mcp") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == {"reset", "step", "close"}
            step_schema = tools["step"].input_schema
            assert step_schema["required"] == ["episode", "action"]
            assert step_schema["properties"]["action"]["type"] == "string"
            assert "move forward" in tools["step"].description  # the environment's instruction, quoted
            assert tools["step"].output_schema["properties"]["done"]["type"] == "boolean"

            started = await client.call_tool("reset", {"task_id": TASK})
            assert not started.is_error, started
            episode = started.structured_content["episode"]
            assert started.structured_content["observation"] == first
            for number, action in enumerate(played.actions, 1):
                stepped = await client.call_tool("step", {"episode": episode, "action": action})
                assert not stepped.is_error, stepped
                assert stepped.structured_content["done"] is (number == len(played.actions))
            assert stepped.structured_content["reward"] > 0 and stepped.structured_content["success"] is True
            ended = await client.call_tool("step", {"episode": episode, "action": "go forward"})
            assert ended.is_error and "has ended" in ended.content[0].text
            assert not (await client.call_tool("close", {"episode": episode})).is_error
            gone = await client.call_tool("step", {"episode": episode, "action": "go forward"})
            assert gone.is_error and f"no live instance {episode}" in gone.content[0].text
            for arguments in ({"episode": "x", "action": "move forward"},
                              {"episode": episode, "action": "x" * 70_000}, {"action": "move forward"},
                              {"episode": 10**40, "action": "move forward"}):
                assert (await client.call_tool("step", arguments)).is_error, arguments
            assert (await client.call_tool("reset", {"task_id": -3})).is_error
            assert (await client.call_tool("reset", {"split": "nope"})).is_error

    asyncio.run(play())


def test_the_mcp_endpoint_needs_the_token():
    token = "mcp-token-12345"
    with serve_env(BabyAIEnv, token=token) as base:
        async def tools(endpoint: str) -> set[str]:
            async with Client(endpoint) as client:
                return {tool.name for tool in (await client.list_tools()).tools}

        assert asyncio.run(tools(f"{base}/token/{token}/mcp")) == {"reset", "step", "close"}
        with pytest.raises(Exception):  # noqa: B017 - the SDK raises its own error for a 401
            asyncio.run(tools(f"{base}/mcp"))


def test_without_the_mcp_package_the_endpoint_says_how_to_get_it(monkeypatch):
    import requests

    from agentgym_env_guess import GuessEnv

    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # what `import` finds when mcp is absent
    with serve_env(GuessEnv) as base:
        answer = requests.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10)
        assert answer.status_code == 501 and "pip install mcp" in answer.json()["error"]["message"]
        assert requests.get(f"{base}/v1/health", timeout=10).status_code == 200  # the rest serves on


def test_a_get_of_the_mcp_endpoint_answers_405_instead_of_an_endless_stream(url):
    # The endpoint is stateless and answers JSON, so a GET's event stream could never carry a
    # message; the SDK held it open (a connection and a task per GET, for as long as the client
    # liked). MCP lets a server without that stream answer 405.
    import requests

    answer = requests.get(f"{url}/mcp", headers={"Accept": "text/event-stream"}, timeout=10)
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert "POST" in answer.json()["error"]["message"]


def test_a_reset_with_a_seed_past_64_bits_is_a_tool_error_that_says_so(url):
    async def reset(seed: int) -> tuple[bool, str]:
        async with Client(f"{url}/mcp") as client:
            result = await client.call_tool("reset", {"task_id": TASK, "seed": seed})
            return result.is_error, " ".join(getattr(part, "text", "") for part in result.content)

    is_error, text = asyncio.run(reset(2**64))
    assert is_error and "seed" in text and "raised" not in text  # the request's fault, not the environment's


@pytest.mark.parametrize(("arguments", "field"), [
    ({"task_id": True}, "task_id"),     # the SDK's lax reading took this as task 1
    ({"task_id": "3"}, "task_id"),
    ({"task_id": TASK, "seed": "7"}, "seed"),
    ({"task_id": TASK, "seed": False}, "seed"),
    ({"task_id": TASK, "episode": True}, "episode"),
])
def test_reset_reads_its_arguments_as_strictly_as_v1(url, arguments, field):
    """A bool is not a task id and a string is not a seed, as /v1's reset says (a tool error naming the field)."""
    async def reset() -> tuple[bool, str]:
        async with Client(f"{url}/mcp") as client:
            result = await client.call_tool("reset", arguments)
            return result.is_error, " ".join(getattr(part, "text", "") for part in result.content)

    is_error, text = asyncio.run(reset())
    assert is_error, text
    assert field in text and "integer" in text, text
