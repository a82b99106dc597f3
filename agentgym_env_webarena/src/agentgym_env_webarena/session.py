"""One env instance's browser state: an isolated context, its tabs, ids and network trace.

Every method here is a coroutine that runs on the pool's browser thread (see `browser.py`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from playwright.async_api import BrowserContext, CDPSession, Page, Request

from agentgym_env_webarena.actions import Action
from agentgym_env_webarena.axtree import ElementIds, Viewport, layout_boxes, render_tree
from agentgym_env_webarena.browser import BrowserPool
from agentgym_env_webarena.config import WebArenaConfig

__all__ = ["BrowserSession", "SessionLostError"]

# Requests a grader never looks at (webarena-verified drops static assets too); skipping them
# keeps the trace small and saves two protocol round trips per image.
_UNTRACED_RESOURCES = {"stylesheet", "image", "media", "font", "script", "texttrack", "manifest", "ping"}
_KEY_NAMES = {
    "ctrl": "Control", "control": "Control", "cmd": "Meta", "meta": "Meta", "command": "Meta",
    "alt": "Alt", "option": "Alt", "shift": "Shift", "enter": "Enter", "return": "Enter",
    "esc": "Escape", "escape": "Escape", "tab": "Tab", "space": "Space", "backspace": "Backspace",
    "delete": "Delete", "del": "Delete", "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft",
    "right": "ArrowRight", "pageup": "PageUp", "pagedown": "PageDown", "home": "Home", "end": "End",
}


class SessionLostError(RuntimeError):
    """The browser holding this session's context died; the episode cannot continue."""


def _normalise_keys(keys: str) -> str:
    parts = [p.strip() for p in keys.replace(" ", "").split("+") if p.strip()]
    return "+".join(_KEY_NAMES.get(p.lower(), p if len(p) > 1 else p) for p in parts)


class BrowserSession:
    """Tabs, element ids and the network trace of one env instance."""

    def __init__(self, pool: BrowserPool, config: WebArenaConfig) -> None:
        self.pool = pool
        self.config = config
        self.context: BrowserContext | None = None
        self.generation = -1
        self.active: Page | None = None
        self._ids: dict[Page, ElementIds] = {}
        self._cdp: dict[Page, CDPSession] = {}
        self._open: dict[Request, int] = {}
        self._trace: OrderedDict[int, dict[str, Any] | None] = OrderedDict()
        self._seq = 0
        self._pending: set[asyncio.Task[None]] = set()
        self._navigating = False
        self._loaded = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.context is not None and self.pool.is_current(self.generation)

    async def reset(self, start_urls: list[str]) -> None:
        """Fresh context (no cookies, storage or tabs from before), one tab per start URL."""
        await self.close()
        browser, self.generation = await self.pool.browser()
        cfg = self.config
        context = await browser.new_context(
            viewport={"width": cfg.viewport_width, "height": cfg.viewport_height},
            ignore_https_errors=True,
            service_workers="block",  # a worker would answer requests outside the trace
        )
        context.set_default_timeout(cfg.action_timeout_s * 1000)
        context.set_default_navigation_timeout(cfg.navigation_timeout_s * 1000)
        context.on("request", self._on_request)
        context.on("requestfinished", lambda r: self._spawn(self._record(r)))
        context.on("requestfailed", lambda r: self._open.pop(r, None))
        context.on("page", self._on_page)
        self.context = context
        for url in start_urls or ["about:blank"]:
            page = await context.new_page()
            await self._goto(page, url)
        self.active = context.pages[0]
        await self.active.bring_to_front()

    async def close(self) -> None:
        """Close the context (and with it every tab). Safe on a dead browser; idempotent."""
        for task in list(self._pending):
            task.cancel()
        self._pending.clear()
        context, self.context, self.active = self.context, None, None
        self._ids.clear()
        self._cdp.clear()
        self._open.clear()
        self._trace.clear()
        self._navigating = False
        if context is not None:
            with contextlib.suppress(Exception):  # the browser may be gone already; nothing left to free
                await context.close()

    # -- events --------------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _on_page(self, page: Page) -> None:
        # Popups and target=_blank links become the active tab, as in a real browser, but a
        # page may not open tabs without bound.
        assert self.context is not None
        page.on("load", lambda p=page: self._on_load(p))
        if len(self.context.pages) > self.config.max_tabs:
            self._spawn(page.close())
            return
        if self.active is not None:
            self.active = page

    def _on_load(self, page: Page) -> None:
        if page is self.active:
            self._loaded.set()

    def _on_request(self, request: Request) -> None:
        if request.is_navigation_request() and self.active is not None and request.frame == self.active.main_frame:
            # The page's load state still describes the old document until the new one commits,
            # so wait for the next `load` event rather than for a load state.
            self._navigating = True
            self._loaded.clear()
        if request.resource_type in _UNTRACED_RESOURCES:
            return
        self._seq += 1
        self._open[request] = self._seq
        self._trace[self._seq] = None
        while len(self._trace) > self.config.max_trace_entries:
            self._trace.popitem(last=False)

    async def _record(self, request: Request) -> None:
        """Turn a finished request into a HAR entry, the format webarena-verified's graders read."""
        seq = self._open.pop(request, None)
        if seq is None or seq not in self._trace:
            return
        response = await request.response()
        if response is None:
            self._trace.pop(seq, None)
            return
        req_headers = await request.headers_array()
        resp_headers = await response.headers_array()
        entry: dict[str, Any] = {
            "startedDateTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "request": {"method": request.method, "url": request.url, "headers": req_headers},
            "response": {
                "status": response.status,
                "headers": resp_headers,
                "redirectURL": next((h["value"] for h in resp_headers if h["name"].lower() == "location"), ""),
                "cookies": _cookies(resp_headers),
            },
        }
        post = request.post_data
        if post is not None:
            mime = next((h["value"] for h in req_headers if h["name"].lower() == "content-type"), "")
            entry["request"]["postData"] = {"mimeType": mime, "text": post}
        mime = next((h["value"] for h in resp_headers if h["name"].lower() == "content-type"), "")
        if "json" in mime and request.resource_type in ("xhr", "fetch") and response.status < 300:
            with contextlib.suppress(Exception):  # body already discarded by the browser; grade without it
                body = await response.text()
                if len(body) <= 256_000:
                    entry["response"]["content"] = {"mimeType": mime, "text": body}
        if seq in self._trace:
            self._trace[seq] = entry

    async def network_trace(self) -> list[dict[str, Any]]:
        """The episode's HAR entries in request order, after in-flight ones have been recorded."""
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=2.0)
        return [entry for entry in self._trace.values() if entry is not None]

    # -- observation ---------------------------------------------------------------------------
    async def _client(self, page: Page) -> CDPSession:
        cdp = self._cdp.get(page)
        if cdp is None:
            assert self.context is not None
            cdp = self._cdp[page] = await self.context.new_cdp_session(page)
        return cdp

    def _page(self) -> Page:
        if not self.alive:
            raise SessionLostError("the browser was restarted after a crash; reset to start a new episode")
        assert self.context is not None
        if self.active is None or self.active.is_closed():
            pages = self.context.pages
            if not pages:
                raise SessionLostError("every tab of this episode was closed")
            self.active = pages[-1]
        return self.active

    async def observe(self) -> dict[str, Any]:
        """Accessibility tree text, URL and tab list of the active tab."""
        page = self._page()
        cdp = await self._client(page)
        ax = await self._fresh_ax_tree(page, cdp)
        viewport = None
        boxes: dict[int, tuple[float, float, float, float]] = {}
        if self.config.current_viewport_only:
            snapshot = await cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": []})
            boxes, sx, sy = layout_boxes(snapshot)
            viewport = Viewport(sx, sy, self.config.viewport_width, self.config.viewport_height)
        ids = self._ids.setdefault(page, ElementIds())
        tree = render_tree(ax.get("nodes", []), boxes, viewport, ids)
        assert self.context is not None
        tabs = []
        for index, tab in enumerate(self.context.pages):
            try:
                title = await tab.title()
            except Exception:  # noqa: BLE001 - a tab mid-navigation has no title yet
                title = ""
            tabs.append(f"Tab {index}{' (current)' if tab is page else ''}: {title}")
        return {"tree": tree, "url": page.url, "tabs": tabs}

    async def _fresh_ax_tree(self, page: Page, cdp: CDPSession) -> dict[str, Any]:
        """The AX tree of the document now shown, not of the one just navigated away from.

        Chromium updates its accessibility tree asynchronously; right after a navigation (more so
        on a loaded machine) `getFullAXTree` can still answer with the previous document's
        emptied root. The root's name is the document title, so retry until they agree.
        """
        deadline = time.monotonic() + min(2.0, self.config.action_timeout_s / 2)
        while True:
            title = await page.title()
            ax = await cdp.send("Accessibility.getFullAXTree")
            nodes = ax.get("nodes", [])
            root = nodes[0] if nodes else {}
            root_name = (root.get("name") or {}).get("value", "")
            if (len(nodes) > 1 and " ".join(str(root_name).split()) == " ".join(title.split())) or (
                time.monotonic() > deadline
            ):
                return ax
            await asyncio.sleep(0.03)

    async def screenshot(self) -> bytes:
        return await self._page().screenshot(type="jpeg", quality=50)

    async def screenshot_to(self, path: Path) -> str:
        path.write_bytes(await self.screenshot())
        return str(path)

    async def screenshot_b64(self) -> str:
        return base64.b64encode(await self.screenshot()).decode()

    # -- actions -------------------------------------------------------------------------------
    async def _goto(self, page: Page, url: str) -> str | None:
        try:
            await page.goto(url, wait_until="load")
        except Exception as exc:  # noqa: BLE001 - a bad URL is the agent's mistake, reported to it
            return f"could not open {url}: {str(exc).splitlines()[0]}"
        return None

    async def _element_point(self, page: Page, element_id: int) -> tuple[float, float]:
        ids = self._ids.get(page)
        backend = ids.to_backend.get(element_id) if ids else None
        if backend is None:
            raise LookupError(f"there is no element [{element_id}] on this page; use an id from the latest observation")
        cdp = await self._client(page)
        try:
            await cdp.send("DOM.scrollIntoViewIfNeeded", {"backendNodeId": backend})
            quads = (await cdp.send("DOM.getContentQuads", {"backendNodeId": backend}))["quads"]
        except Exception as exc:  # noqa: BLE001 - detached or invisible node
            raise LookupError(f"element [{element_id}] is no longer on the page or not visible") from exc
        if not quads:
            raise LookupError(f"element [{element_id}] has no visible area to act on")
        quad = quads[0]
        return sum(quad[0::2]) / 4, sum(quad[1::2]) / 4

    async def _settle(self, page: Page) -> None:
        """Wait for a navigation the action may have started (a link click, a form submit)."""
        with contextlib.suppress(Exception):  # the page navigated away while evaluating; that is the point
            await page.evaluate("0")  # one renderer round trip: a click's navigation has begun by now
        if self._navigating:
            with contextlib.suppress(TimeoutError):  # a slow page: observe what is there
                await asyncio.wait_for(self._loaded.wait(), self.config.navigation_timeout_s)
        self._navigating = False

    async def execute(self, action: Action) -> str | None:
        """Perform a browser action. Returns a message for the agent when it could not be done."""
        page = self._page()
        assert self.context is not None
        self._navigating = False
        kind = action.kind
        try:
            if kind in ("click", "hover", "type"):
                assert action.element_id is not None
                x, y = await self._element_point(page, action.element_id)
                if kind == "hover":
                    await page.mouse.move(x, y)
                    return None
                await page.mouse.click(x, y)
                if kind == "type":
                    await page.keyboard.press("Control+A")
                    await page.keyboard.press("Backspace")
                    await page.keyboard.insert_text(action.text)
                    if action.press_enter:
                        await page.keyboard.press("Enter")
            elif kind == "press":
                await page.keyboard.press(_normalise_keys(action.keys))
            elif kind == "scroll":
                sign = 1 if action.direction == "down" else -1
                await page.evaluate(f"window.scrollBy(0, {sign} * window.innerHeight * 0.9)")
            elif kind == "new_tab":
                if len(self.context.pages) >= self.config.max_tabs:
                    return f"cannot open more than {self.config.max_tabs} tabs; close one first"
                self.active = await self.context.new_page()
                return None
            elif kind == "tab_focus":
                pages = self.context.pages
                if action.tab_index is None or not 0 <= action.tab_index < len(pages):
                    return f"there is no tab {action.tab_index}; tabs are numbered 0 to {len(pages) - 1}"
                self.active = pages[action.tab_index]
                await self.active.bring_to_front()
                return None
            elif kind == "close_tab":
                await page.close()
                self._ids.pop(page, None)
                self._cdp.pop(page, None)
                if not self.context.pages:
                    await self.context.new_page()
                self.active = self.context.pages[-1]
                await self.active.bring_to_front()
                return None
            elif kind == "goto":
                return await self._goto(page, action.url)
            elif kind in ("go_back", "go_forward"):
                move = page.go_back if kind == "go_back" else page.go_forward
                before = page.url
                if await move(wait_until="load") is None and page.url == before:
                    return f"{kind}: there is no page to go {'back' if kind == 'go_back' else 'forward'} to"
                return None
            else:
                return f"{kind} is not a browser action"
        except LookupError as exc:
            return str(exc)
        await self._settle(page)
        return None


def _cookies(headers: list[dict[str, str]]) -> list[dict[str, str]]:
    """Cookies set by a response, from its Set-Cookie headers (name and value only)."""
    cookies = []
    for header in headers:
        if header["name"].lower() != "set-cookie":
            continue
        for line in header["value"].split("\n"):
            pair = line.split(";", 1)[0]
            if "=" in pair:
                name, value = pair.split("=", 1)
                cookies.append({"name": name.strip(), "value": value.strip()})
    return cookies
