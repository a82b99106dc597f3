"""MCP on every environment server: the environment's actions as tools, at ``/mcp``.

A tool-calling model (OpenEnv's MCP environments, verifiers, any MCP client) plays an episode with
three tools, listed with JSON schemas by ``tools/list`` and run by ``tools/call``:

* ``reset(task_id=None, seed=None, split=None, episode=None)`` starts an episode (on ``episode``,
  or a new one) and answers its id and first observation;
* ``step(episode, action)`` sends one action (the text the environment's instruction describes,
  quoted in the tool's description) and answers the observation, reward and whether it is done;
* ``close(episode)`` frees it (idle episodes also expire, as every instance of the server does).

An episode is an instance of the server's instance table, named by its id, so requests need no
transport session (the MCP endpoint is stateless, answering JSON to POST; other methods, such as
the GET that would open an event stream, answer 405) and ``--workers`` routes a
``step`` to the worker that holds its episode. The endpoint is MCP's streamable HTTP transport,
served by the ``mcp`` SDK, which is imported on the first request (``pip install mcp``; without it
``/mcp`` answers 501 saying so). The server's token guards it like every route; the SDK's DNS
rebinding check is off, as for the server's other routes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, Field, Strict, ValidationError

from agentgym_core.http.errors import ServerError, error_status, malformed
from agentgym_core.http.instances import InstanceTable
from agentgym_core.http.openenv_face import OpenEnvFace, OpenEnvReset
from agentgym_core.http.protocol import MAX_ACTION_CHARS, check_text

__all__ = ["MCPFace", "MCP_PATH"]

MCP_PATH = "/mcp"

StrictInt = Annotated[int, Strict()]
"""A tool's integer argument, read as /v1 reads one: the SDK's lax reading takes ``true`` as 1 and "7" as 7."""


class Started(BaseModel):
    """What ``reset`` answers."""

    episode: int = Field(description="The episode's id: pass it to step and close.")
    task_id: int = Field(description="The task being played.")
    observation: str = Field(description="The first observation: the goal and what the agent sees.")


class Stepped(BaseModel):
    """What ``step`` answers."""

    observation: str = Field(description="The environment's answer to the action.")
    reward: float = Field(description="The reward of this step.")
    done: bool = Field(description="Whether the episode has ended (reset to play again).")
    success: bool | None = Field(default=None, description="Whether the task was accomplished; None while undecided.")
    invalid_action: bool | None = Field(default=None, description="The environment refused the action.")


class Closed(BaseModel):
    """What ``close`` answers."""

    episode: int
    closed: bool


class MCPFace:
    """The ASGI app of ``/mcp``: the SDK's streamable HTTP endpoint, built on first use.

    Args:
        table: the server's instance table (an episode is one of its instances).
        openenv: the server's OpenEnv operations (task choice is shared with OpenEnv's reset).
        env_name: the environment's name, the MCP server's name.
        instruction: returns the environment's instruction (quoted in ``step``'s description).
        max_body_bytes: larger requests answer 413.
    """

    def __init__(self, table: InstanceTable, openenv: OpenEnvFace, *, env_name: str,
                 instruction: Callable[[], str], max_body_bytes: int) -> None:
        self.table, self.openenv, self.env_name = table, openenv, env_name
        self.instruction, self.max_body_bytes = instruction, max_body_bytes
        self._manager: Any = None
        self._starting = asyncio.Lock()
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            # Stateless and answering JSON, the endpoint has no event stream a GET could open: the SDK
            # held one open that could never carry a message. MCP lets such a server answer 405.
            await _answer(send, 405, {"error": {"code": "method_not_allowed", "details": None, "message":
                          f"{scope['method']} {MCP_PATH}: this MCP endpoint is stateless and answers JSON; "
                          "send JSON-RPC requests with POST"}}, headers=((b"allow", b"POST"),))
            return
        if self._manager is None:
            async with self._starting:
                if self._manager is None:
                    try:
                        await self._start()
                    except ImportError:
                        await _answer(send, 501, {"error": {"code": "not_implemented", "details": None, "message":
                                      "this server's MCP endpoint needs the mcp package: pip install mcp "
                                      "where the server runs, then restart it"}})
                        return
        await self._manager.handle_request(scope, receive, send)

    async def aclose(self) -> None:
        """Stop the SDK's session manager (the server is shutting down)."""
        if self._stop is not None and self._holder is not None:
            self._stop.set()
            await self._holder

    async def _start(self) -> None:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.transport_security import TransportSecuritySettings

        server = MCPServer(name=f"agentgym-{self.env_name}",
                           instructions=f"Play {self.env_name} episodes: reset, then step with actions until done.")
        self._add_tools(server)
        server.streamable_http_app(
            streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
            max_request_body_size=self.max_body_bytes,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        manager = server.session_manager
        ready, self._stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:  # the manager's task group lives in this task, from start to shutdown
            async with manager.run():
                ready.set()
                await self._stop.wait()

        self._holder = asyncio.create_task(hold())
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({waiter, self._holder}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            waiter.cancel()
            self._holder.result()  # raises what stopped it
        self._manager = manager

    def _add_tools(self, server: Any) -> None:
        from mcp.server.mcpserver.exceptions import ToolError

        face, table = self.openenv, self.table

        async def run(fn: Callable[[], Any]) -> Any:
            try:
                return await face.call(fn)
            except Exception as exc:  # the protocol's message, as the tool's error
                raise ToolError(error_status(exc).message) from None

        async def reset(task_id: StrictInt | None = None, seed: StrictInt | None = None, split: str | None = None,
                        episode: StrictInt | None = None) -> Started:
            """Start an episode: on task_id, or one picked from split (default train) by seed, else at random.
            Pass episode to play again on an episode you hold; otherwise a new one is made."""
            def start() -> Started:
                try:  # read as OpenEnv's /reset reads them (a seed past 64 bits is refused)
                    request = OpenEnvReset(task_id=task_id, seed=seed, split=split)
                except ValidationError as exc:
                    raise malformed("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                              for e in exc.errors())) from None
                task = face.pick_task(request)
                if episode is not None:
                    result = table.run(episode, lambda i: i.reset(task, seed))
                    return Started(episode=episode, task_id=task, observation=result.observation)
                instance, result = table.create(lambda i: i.reset(task, seed))
                return Started(episode=instance.instance_id, task_id=task, observation=result.observation)

            return await run(start)

        async def step(episode: StrictInt, action: str) -> Stepped:
            def act() -> Stepped:
                if len(action) > MAX_ACTION_CHARS:
                    raise ServerError(422, "malformed_request",
                                      f"the action is {len(action)} characters long; the limit is {MAX_ACTION_CHARS}")
                try:
                    text = check_text(action)
                except ValueError as exc:
                    raise ServerError(422, "malformed_request", f"action: {exc}") from None
                result = table.run(episode, lambda i: i.step(text))
                return Stepped(observation=result.observation, reward=result.reward, done=result.done,
                               success=result.success, invalid_action=result.invalid_action)

            return await run(act)

        async def close(episode: StrictInt) -> Closed:
            """Close an episode you no longer need (idle ones expire too)."""
            await run(lambda: table.close(episode))
            return Closed(episode=episode, closed=True)

        server.add_tool(reset, name="reset")
        server.add_tool(step, name="step", description=(
            "Send one action to the episode and get the environment's answer. The environment's "
            "instruction below says which actions it takes; it was written for agents that answer in "
            f"text: here, send the action alone.\n\n{self.instruction()}"))
        server.add_tool(close, name="close")


async def _answer(send: Any, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})
