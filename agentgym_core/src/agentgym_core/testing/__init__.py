"""Public conformance checkers for every extension point, and helpers to test them.

=====================  ==========================================================================
checker                checks
=====================  ==========================================================================
``check_env``          the environment contract, in-process
``check_env_http``     the same through a loopback server: identical episodes
``check_backend``      a rollout backend: sampling, log-probs, weight loading
``check_trajectory``   a trajectory is exactly right to train on (tokens, mask, log-probs)
``check_estimator``    an advantage estimator: shapes, masking, reward placement (needs torch)
=====================  ==========================================================================

Plugin authors run them in their own test suites; agentgym's suite runs them over every
installed plugin. Names that need torch are imported on first use, so an environment package
can use ``check_env`` with only the core installed.
"""

from __future__ import annotations

from typing import Any

from agentgym_core.testing.backend import BackendCheckError, check_backend
from agentgym_core.testing.env_check import (
    EnvCheckReport,
    EnvContractError,
    EpisodeRecord,
    check_env,
    check_env_http,
)
from agentgym_core.testing.serving import serve_app, serve_env, start_server_process
from agentgym_core.testing.trajectory import TrajectoryCheckError, TrajectoryReport, check_trajectory

__all__ = [
    "BackendCheckError",
    "EnvCheckReport",
    "EnvContractError",
    "EpisodeRecord",
    "EstimatorCheckError",
    "TrajectoryCheckError",
    "TrajectoryReport",
    "check_backend",
    "check_env",
    "check_env_http",
    "check_estimator",
    "check_trajectory",
    "serve_app",
    "serve_env",
    "start_server_process",
    "tiny_chat_model",
]

_LAZY = {
    "check_estimator": "agentgym_core.rl.checks",
    "EstimatorCheckError": "agentgym_core.rl.checks",
    "tiny_chat_model": "agentgym_core.testing.tiny_model",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentgym_core.testing' has no attribute {name!r}")
