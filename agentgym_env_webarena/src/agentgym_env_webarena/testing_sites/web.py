"""The bit of HTTP plumbing the local test sites share: a threaded stdlib server on loopback."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

__all__ = ["Page", "Request", "SiteHandler", "SiteServer"]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: str
    cookies: dict[str, str]


@dataclass
class Page:
    body: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


class SiteHandler(BaseHTTPRequestHandler):
    """Subclasses implement `route(request) -> Page`."""

    site_name = "site"
    protocol_version = "HTTP/1.1"

    def route(self, request: Request) -> Page:  # pragma: no cover - overridden
        raise NotImplementedError

    def _serve(self, method: str) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        cookies = {k: m.value for k, m in SimpleCookie(self.headers.get("Cookie", "")).items()}
        try:
            page = self.route(Request(method, url.path, parse_qs(url.query), body, cookies))
        except Exception as exc:  # noqa: BLE001 - a test site answers 500 rather than dropping the socket
            page = Page(f"<h1>Server error</h1><p>{type(exc).__name__}</p>", status=500)
        data = page.body.encode()
        self.send_response(page.status)
        self.send_header("Content-Type", page.headers.pop("Content-Type", "text/html; charset=utf-8"))
        self.send_header("Content-Length", str(len(data)))
        for name, value in page.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._serve("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet: the browser trace is the log that matters


class SiteServer:
    """Serve one handler class on 127.0.0.1 (port 0 = a free port) from a daemon thread."""

    def __init__(self, handler: type[SiteHandler], port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=f"site-{handler.site_name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
