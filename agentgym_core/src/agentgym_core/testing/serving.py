"""Run an environment server on loopback inside the current process (tests, notebooks, benches).

The helpers live in :mod:`agentgym_core.http.serving` (production code uses them too); this module
re-exports them for tests and for code written against ``agentgym_core.testing``.
"""

from __future__ import annotations

from agentgym_core.http.serving import serve_app, serve_env

__all__ = ["serve_app", "serve_env"]
