"""Reading a request body at the ASGI level, under a size limit, and handing it on.

The server's body limit, the direct routes and the worker front all read the whole body before
anything else sees the request (FastAPI turns errors raised while it reads into a 400, so a limit
must be enforced first), then give the app a ``receive`` that replays it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TOO_LARGE", "declared_too_large", "read_body", "replay"]

TOO_LARGE = object()
""":func:`read_body`'s answer for a body over the limit."""


def declared_too_large(scope: Any, limit: int) -> bool:
    """The request's ``content-length`` header already says more than ``limit`` bytes."""
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            return value.isdigit() and int(value) > limit
    return False


async def read_body(receive: Any, limit: int) -> bytes | object | dict:
    """The whole body; :data:`TOO_LARGE` once it passes ``limit``; the message itself (a dict, e.g.
    ``http.disconnect``) when the client went away first."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return message
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return TOO_LARGE
        chunks.append(chunk)
        more = message.get("more_body", False)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def replay(body: bytes, receive: Any) -> Any:
    """A ``receive`` that yields ``body`` once as the whole request, then defers to ``receive``."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
