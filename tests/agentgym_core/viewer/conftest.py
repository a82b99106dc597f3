"""Viewer fixtures: serve a run directory on loopback and hand back the base URL."""

from __future__ import annotations

import pytest


@pytest.fixture
def serve_viewer():
    """``serve_viewer(root)`` -> base URL of the viewer app over ``root`` (stopped after the test)."""
    import contextlib

    from agentgym_core.testing.serving import serve_app
    from agentgym_core.viewer import create_viewer_app

    with contextlib.ExitStack() as stack:
        yield lambda root: stack.enter_context(serve_app(create_viewer_app(root)))
