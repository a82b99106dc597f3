"""The browser pool: one Chromium process per Python process, one isolated context per env instance.

Playwright objects belong to the event loop that created them, and the env server calls each env
instance from whichever worker thread is free. So the pool owns a private thread running an
asyncio loop with Playwright's async API, and every env method submits a coroutine to it and
waits (`BrowserPool.run`). Instances on different threads then interleave on one loop instead of
racing on one connection, and a slow page in one instance does not block the others.

If Chromium dies (killed from outside, out of memory), Playwright reports the disconnection; the
next `browser()` call launches a fresh one and bumps `generation`, so sessions holding a context
of the dead browser can tell that their episode is lost while the server keeps running.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from playwright.async_api import Browser, Playwright, async_playwright

from agentgym_env_webarena.config import BrowserConfig

__all__ = ["BrowserPool", "BrowserUnavailableError", "OFF_NETWORK_FLAGS"]

T = TypeVar("T")

#: Switches that keep Chromium from calling home: no update checks, sync, field trials or
#: first-run pings. The sites it visits are whatever the tasks point at.
OFF_NETWORK_FLAGS: tuple[str, ...] = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--metrics-recording-only",
    "--disable-breakpad",
    "--mute-audio",
    # Containers often have a 64 MB /dev/shm, which makes renderers crash on big pages.
    "--disable-dev-shm-usage",
)


class BrowserUnavailableError(RuntimeError):
    """Chromium could not be started; the message says what to install or configure."""


class BrowserPool:
    """A Chromium process and the thread that drives it, shared by all env instances with one config."""

    _pools: dict[BrowserConfig, BrowserPool] = {}
    _pools_lock = threading.Lock()

    @classmethod
    def shared(cls, config: BrowserConfig) -> BrowserPool:
        """The process-wide pool for `config` (created on first use)."""
        with cls._pools_lock:
            pool = cls._pools.get(config)
            if pool is None or pool._closed:
                pool = cls._pools[config] = cls(config)
            return pool

    def __init__(self, config: BrowserConfig) -> None:
        if not Path(config.executable_path).exists():
            raise BrowserUnavailableError(
                f"Chromium not found at {config.executable_path!r}. Install Debian's package "
                "(`apt-get install -y chromium`) or set browser.executable_path; do not run `playwright install`."
            )
        self.config = config
        # An inert switch that tags our browser process, so `browser_pid` can find it in /proc.
        self.marker = f"--agentgym-webarena-pool={uuid.uuid4().hex[:12]}"
        self.generation = 0
        self.launches = 0
        self._closed = False
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._loop = asyncio.new_event_loop()
        self._lock: asyncio.Lock | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentgym-webarena-browser", daemon=True)
        self._thread.start()
        atexit.register(self.shutdown)

    # -- running work on the browser thread ------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the browser thread and wait for it; TimeoutError after `timeout` seconds."""
        if self._closed:
            coro.close()
            raise BrowserUnavailableError("the browser pool was shut down")
        if threading.current_thread() is self._thread:
            raise RuntimeError("BrowserPool.run called from the browser thread itself (would deadlock)")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"browser operation took longer than {timeout} s") from None

    # -- the browser ----------------------------------------------------------------------------
    async def browser(self) -> tuple[Browser, int]:
        """The live browser and its generation, launching (or relaunching after a crash) as needed."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._browser is None or not self._browser.is_connected():
                await self._launch()
            assert self._browser is not None
            return self._browser, self.generation

    def is_current(self, generation: int) -> bool:
        """Whether a context made under `generation` still belongs to a live browser."""
        return generation == self.generation and self._browser is not None and self._browser.is_connected()

    async def _launch(self) -> None:
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        if self._browser is not None:
            with contextlib.suppress(Exception):  # the old browser is already gone; nothing to save
                await self._browser.close()
            self._browser = None
        args = [*OFF_NETWORK_FLAGS, f"--js-flags=--max-old-space-size={self.config.js_heap_mb}", self.marker]
        args.extend(self.config.extra_args)
        try:
            self._browser = await self._playwright.chromium.launch(
                executable_path=self.config.executable_path,
                headless=self.config.headless,
                # The sandbox needs user namespaces, which root in a container usually lacks.
                chromium_sandbox=os.geteuid() != 0,
                args=args,
                timeout=self.config.launch_timeout_s * 1000,
            )
        except Exception as exc:
            raise BrowserUnavailableError(
                f"could not start Chromium ({self.config.executable_path}): {exc}. Check that the binary runs "
                "(`chromium --headless --version`) and that the machine has memory to spare."
            ) from exc
        self.generation += 1
        self.launches += 1

    # -- inspection (tests, benchmarks, health checks) -------------------------------------------
    def browser_pid(self) -> int | None:
        """PID of the Chromium browser process (not its renderers), or None when none runs."""
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if self.marker.encode() in cmdline and not any(arg.startswith(b"--type=") for arg in cmdline):
                return int(entry.name)
        return None

    def browser_rss_bytes(self) -> int:
        """Resident memory of the browser process and all its children (renderers, GPU, utility)."""
        pid = self.browser_pid()
        if pid is None:
            return 0
        total, todo = 0, [pid]
        while todo:
            current = todo.pop()
            try:
                for line in Path(f"/proc/{current}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                for task in Path(f"/proc/{current}/task").iterdir():
                    todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue
        return total

    def shutdown(self) -> None:
        """Close the browser and stop the thread. Idempotent; later `run` calls fail clearly."""
        if self._closed:
            return
        self._closed = True

        async def _stop() -> None:
            if self._browser is not None:
                with contextlib.suppress(Exception):  # already dead is fine
                    await self._browser.close()
            if self._playwright is not None:
                await self._playwright.stop()

        with contextlib.suppress(Exception):  # best effort at exit
            asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        with self._pools_lock:
            if self._pools.get(self.config) is self:
                del self._pools[self.config]
