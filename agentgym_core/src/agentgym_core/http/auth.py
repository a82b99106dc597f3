"""A shared token for servers that leave loopback: who may create, step and close instances.

An environment server (``agentgym serve --token``) or model server (``agentgym serve-model
--token``) started with a token answers a request only when it carries the token, on every route:

* in the header ``Authorization: Bearer TOKEN`` (the scheme in any case, as RFC 9110 says; the
  agentgym clients send it: ``HTTPEnv``, ``EnvPool`` and the trainer read :data:`TOKEN_ENV`);
* or, for clients that cannot send headers (AgentGym's own clients build URLs from a base
  address), in the path: ``http://host:port/token/TOKEN`` is a base URL whose every route
  (``/create``, ``/step``, ``/v1/...``) is authenticated.

A server takes its token from :data:`TOKEN_ENV` or a file (``--token-file``) rather than its command
line, which every user of the machine can read in ``ps``.

Binding an address other than loopback without a token is refused (:func:`check_exposure`),
unless the user says ``--insecure``: instance ids are random, but anyone who can reach the port
could create, step and close instances.
"""

from __future__ import annotations

import hmac
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["TOKEN_ENV", "TOKEN_PATH_PREFIX", "admit", "bearer", "bearer_matches", "check_exposure", "gate",
           "is_loopback", "read_secret_file", "refuse", "resolve_token"]

TOKEN_ENV = "AGENTGYM_TOKEN"
"""Environment variable holding the shared token, for servers and clients alike."""

TOKEN_PATH_PREFIX = "/token/"
"""A path starting ``/token/TOKEN/`` carries the token (for clients that cannot send headers)."""

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "ip6-localhost"}


def resolve_token(given: str | None, *, file: str | os.PathLike[str] | None = None) -> str | None:
    """The token to use: ``given`` (a flag or option), else the first line of ``file``, else
    :data:`TOKEN_ENV`, else None.

    Raises ValueError for a token that cannot travel in a header or a path segment, for both
    ``given`` and ``file``, and for a file that cannot be read.
    """
    if given is not None and file is not None:
        raise ValueError("give the token once: --token or --token-file, not both")
    if file is not None:
        given = read_secret_file(file)
    token = given if given is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and (len(token) < 8 or not token.isascii() or not token.isprintable()
                              or any(c in token for c in " /?#%")):
        raise ValueError("the token must be at least 8 printable ASCII characters without spaces, '/', '?', "
                         "'#' or '%' (it travels in a header and in URL paths); e.g. "
                         "python -c 'import secrets; print(secrets.token_urlsafe(24))'")
    return token


def read_secret_file(file: str | os.PathLike[str]) -> str:
    """The first line of ``file``, stripped: a token or key kept out of the command line (and ``ps``).

    Raises ValueError, naming the file, when it cannot be read or its first line is empty.
    """
    try:
        lines = Path(file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the token file {os.fspath(file)!r}: {exc}") from None
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise ValueError(f"the token file {os.fspath(file)!r} is empty; write the token on its first line")
    return secret


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine."""
    return host in _LOOPBACK or host.startswith("127.")


def check_exposure(host: str, token: str | None, *, insecure: bool, what: str = "server") -> None:
    """Raise ValueError when ``host`` leaves loopback with no token and the user did not say ``--insecure``."""
    if token is None and not insecure and not is_loopback(host):
        raise ValueError(
            f"refusing to bind {host}: anyone who can reach it could use this {what}. Set a shared token "
            f"(${TOKEN_ENV} or --token-file FILE; clients read ${TOKEN_ENV}), or pass --insecure on a network "
            "you trust")


def bearer(token: str) -> bytes:
    """The ``Authorization`` header value that carries ``token``."""
    return b"Bearer " + token.encode()


def bearer_matches(value: bytes, token: str) -> bool:
    """Whether the ``Authorization`` header ``value`` carries ``token``: ``Bearer``, in any case (RFC 9110
    makes auth schemes case-insensitive), then the token, compared in constant time. Spaces and tabs around
    the token are not part of it (RFC 9110, section 5.5: a field value excludes them), so the answer does not
    depend on whether the server's HTTP parser stripped them first (httptools does)."""
    scheme, _, credentials = value.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(b" \t"), token.encode())


def admit(scope: dict[str, Any], token: str) -> dict[str, Any] | None:
    """``scope`` if the request carries ``token`` (with a path token stripped off); None if not."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization" and bearer_matches(value, token):
            return scope
    path: str = scope.get("path", "")
    if path.startswith(TOKEN_PATH_PREFIX):
        given, slash, rest = path[len(TOKEN_PATH_PREFIX):].partition("/")
        if hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode()):
            stripped = slash + rest or "/"
            raw = scope.get("raw_path")
            if raw is not None:
                raw_given, raw_slash, raw_rest = raw[len(TOKEN_PATH_PREFIX):].partition(b"/")
                raw = raw_slash + raw_rest or b"/"
            return {**scope, "path": stripped, "raw_path": raw}
    return None


async def refuse(scope: dict[str, Any], send: Any) -> None:
    """Answer 401 in the protocol's error shape (a WebSocket is closed before it opens: 403)."""
    if scope.get("type") == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized: send the server's token"})
        return
    carried = any(name == b"authorization" for name, _ in scope.get("headers") or ()) or \
        scope.get("path", "").startswith(TOKEN_PATH_PREFIX)
    what = "the token sent is wrong" if carried else "no token was sent"
    body = json.dumps({"error": {"code": "unauthorized", "details": None, "message":
                       f"{what}: this server needs its shared token, as the header 'Authorization: Bearer TOKEN' "
                       f"or as a path prefix ({TOKEN_PATH_PREFIX}TOKEN/...); agentgym clients send "
                       f"${TOKEN_ENV}"}}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": body})


async def gate(scope: dict[str, Any], send: Any, token: str | None) -> dict[str, Any] | None:
    """The scope to serve (a path token stripped); None once the request (HTTP or WebSocket) was refused.

    With ``token`` None every request passes unchanged.
    """
    if token is None:
        return scope
    admitted = admit(scope, token)
    if admitted is None:
        await refuse(scope, send)
    return admitted
