"""Viewer fixtures: serve a run directory on loopback and hand back the base URL; a headless
Chromium page (Debian's ``/usr/bin/chromium`` driven by Playwright, never ``playwright install``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def serve_viewer():
    """``serve_viewer(root)`` -> base URL of the viewer app over ``root`` (stopped after the test)."""
    import contextlib

    from agentgym_core.testing.serving import serve_app
    from agentgym_core.viewer import create_viewer_app

    with contextlib.ExitStack() as stack:
        yield lambda root: stack.enter_context(serve_app(create_viewer_app(root)))


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, serve_viewer):
    """A page that records console errors; the test fails if there are any.

    It depends on ``serve_viewer`` so that it closes before the server stops (the page polls).
    """
    context = browser.new_context(viewport={"width": 1500, "height": 950})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(15_000)
    yield pg
    context.close()
    assert not errors, f"console errors: {errors}"
