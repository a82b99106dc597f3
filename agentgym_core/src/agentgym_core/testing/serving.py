"""Run an environment server on loopback: in this process (:func:`serve_app`, :func:`serve_env`) or as a
command of its own (:func:`start_server_process`), for tests, notebooks and benches.

The in-process helpers live in :mod:`agentgym_core.http.serving` (production code uses them too); this
module re-exports them for code written against ``agentgym_core.testing``.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence

from agentgym_core.http.serving import serve_app, serve_env

__all__ = ["serve_app", "serve_env", "start_server_process"]

_SERVING = re.compile(r"\b(?:on|at) (http://[^\s/]+:\d+)")  # "serving X on http://HOST:PORT", "... at http://..."


def start_server_process(command: Sequence[str], *, env: Mapping[str, str] | None = None,
                         cwd: str | os.PathLike[str] | None = None,
                         startup_timeout_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """Start a server command given ``--port 0`` (``agentgym serve ENV --port 0``, ``agentgym view``,
    ``agentgym serve-model``) and return ``(process, base_url)`` once it prints the address it listens on
    (``http://HOST:PORT``, without a path).

    The server binds the port itself, so no other process can take it between choosing and binding it,
    as one can a port a test picked free and closed. Its stdout and stderr go to temporary files (a
    server that logs more than a pipe holds would block); an exit before the address, or no address
    within ``startup_timeout_s``, raises with the end of its stderr. The caller stops the process.
    """
    out = tempfile.TemporaryFile("w+")  # noqa: SIM115 - open as long as the server runs
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115
    process = subprocess.Popen(list(command), stdout=out, stderr=err, text=True, cwd=cwd,
                               env=dict(env) if env is not None else None)
    deadline = time.monotonic() + startup_timeout_s
    while True:
        out.seek(0)
        found = _SERVING.search(out.read())
        if found:
            return process, found.group(1)
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
                what = f"printed no address within {startup_timeout_s:.0f} s"
            else:
                what = f"exited with code {process.returncode}"
            err.seek(0)
            raise RuntimeError(f"{' '.join(command)} {what}: {err.read()[-3000:]}")
        time.sleep(0.05)
