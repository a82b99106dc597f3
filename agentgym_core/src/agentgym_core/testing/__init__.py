"""Public conformance checkers for extension points, and helpers to test them.

``check_env`` checks the environment contract in-process; ``check_env_http`` serves the class on
loopback and checks that an HTTP client plays exactly the same episodes. Plugin authors run them
in their own test suites; agentgym's suite runs them over every installed environment.
"""

from __future__ import annotations

from agentgym_core.testing.env_check import EnvCheckReport, EpisodeRecord, check_env, check_env_http
from agentgym_core.testing.serving import serve_app, serve_env

__all__ = [
    "EnvCheckReport",
    "EpisodeRecord",
    "check_env",
    "check_env_http",
    "serve_app",
    "serve_env",
]
