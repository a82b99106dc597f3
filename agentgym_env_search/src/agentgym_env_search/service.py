"""The retriever as its own HTTP service, shared by every environment instance (as in Search-R1).

One process holds the index; environment servers call ``POST /retrieve``. The route and its
fields are Search-R1's retrieval server's (``{"queries": [...], "topk": 3, "return_scores":
true}`` -> ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``), so Search-R1
clients work against it and :class:`RemoteRetriever` works against a Search-R1 server.

Queries are batched twice: a request may carry many queries, and concurrent requests (one per
environment instance, typically) are merged by a :class:`MicroBatcher` into one retriever call
of up to ``max_batch`` queries. By default it never waits: whatever queued while the previous
batch ran forms the next batch, so a lone client pays no latency and a busy service batches
itself; ``max_wait_ms > 0`` also waits that long for company.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any

import requests
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from agentgym_env_search.retrievers import Hit, Retriever

__all__ = ["MicroBatcher", "RemoteRetriever", "RetrieveRequest", "create_retriever_app", "serve_retriever"]


class RetrieveRequest(BaseModel):
    """Body of ``POST /retrieve`` (Search-R1's field names)."""

    model_config = ConfigDict(extra="forbid")

    queries: list[str] = Field(description="The queries; each gets its own result list.")
    topk: int | None = Field(default=None, ge=1, le=1000, description="Passages per query; default: the server's.")
    return_scores: bool = Field(default=False, description="Wrap each document as {document, score}.")


class MicroBatcher:
    """Merges concurrent search calls into batched retriever calls on one worker thread."""

    def __init__(self, retriever: Retriever, *, max_batch: int = 64, max_wait_ms: float = 0.0) -> None:
        self.retriever = retriever
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000
        self._queue: queue.Queue[tuple[list[str], int, Future] | None] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="retriever-batcher", daemon=True)
        self._worker.start()
        self.batches = 0
        self.queries = 0

    def submit(self, queries: Sequence[str], k: int) -> Future:
        future: Future = Future()
        self._queue.put((list(queries), k, future))
        return future

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            pending = [first]
            size = len(first[0])
            deadline = time.perf_counter() + self.max_wait_s
            while size < self.max_batch:
                timeout = deadline - time.perf_counter()
                try:
                    item = self._queue.get(timeout=max(timeout, 0)) if timeout > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # finish this batch, then stop
                    break
                pending.append(item)
                size += len(item[0])
            self._search(pending)

    def _search(self, pending: list[tuple[list[str], int, Future]]) -> None:
        k = max(item[1] for item in pending)  # one call at the largest k; smaller asks are cut below
        queries = [q for item in pending for q in item[0]]
        try:
            results = self.retriever.search(queries, k)
        except Exception as exc:  # hand the failure to every waiting request
            for _, _, future in pending:
                future.set_exception(exc)
            return
        self.batches += 1
        self.queries += len(queries)
        start = 0
        for item_queries, item_k, future in pending:
            future.set_result([hits[:item_k] for hits in results[start:start + len(item_queries)]])
            start += len(item_queries)

    def close(self) -> None:
        self._queue.put(None)
        self._worker.join(timeout=5)


def _document(hit: Hit) -> dict[str, Any]:
    return {"id": hit.id, "contents": hit.contents, "title": hit.title, "text": hit.text, "row": hit.row}


def create_retriever_app(retriever: Retriever, *, default_topk: int = 3, max_batch: int = 64,
                         max_wait_ms: float = 0.0) -> FastAPI:
    """A FastAPI app serving ``retriever`` (routes: ``GET /health``, ``POST /retrieve``)."""
    batcher = MicroBatcher(retriever, max_batch=max_batch, max_wait_ms=max_wait_ms)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):  # type: ignore[no-untyped-def]
        yield
        batcher.close()

    app = FastAPI(title="agentgym search retriever", lifespan=lifespan)
    app.state.batcher = batcher

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "retriever": retriever.name, "passages": retriever.num_passages,
                "batches": batcher.batches, "queries": batcher.queries}

    @app.post("/retrieve")
    async def retrieve(body: RetrieveRequest) -> dict[str, Any]:
        if not body.queries:
            return {"result": []}
        try:
            results = await asyncio.wrap_future(batcher.submit(body.queries, body.topk or default_topk))
        except Exception as exc:
            raise HTTPException(status_code=500, detail=f"retriever failed: {type(exc).__name__}: {exc}") from exc
        if body.return_scores:
            return {"result": [[{"document": _document(h), "score": h.score} for h in hits] for hits in results]}
        return {"result": [[_document(h) for h in hits] for hits in results]}

    return app


class RemoteRetriever(Retriever):
    """A :class:`Retriever` that asks a retrieval service (this package's or Search-R1's).

    Args:
        base_url: the service, e.g. ``http://127.0.0.1:8000``.
        timeout: seconds per request.
    """

    name = "remote"

    def __init__(self, base_url: str, *, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._num_passages: int | None = None

    @property
    def num_passages(self) -> int:
        if self._num_passages is None:
            response = self._session.get(f"{self.base_url}/health", timeout=self.timeout)
            response.raise_for_status()
            self._num_passages = int(response.json().get("passages", -1))
        return self._num_passages

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        try:
            response = self._session.post(f"{self.base_url}/retrieve", timeout=self.timeout,
                                          json={"queries": list(queries), "topk": k, "return_scores": True})
        except requests.ConnectionError as exc:
            raise ConnectionError(
                f"cannot reach the retrieval service at {self.base_url}: {exc}. Start it with "
                "`agentgym-search serve-retriever --corpus ... --port ...` or leave retriever_url unset to "
                "search in-process."
            ) from exc
        if response.status_code != 200:
            raise RuntimeError(f"retrieval service {self.base_url} answered {response.status_code}: {response.text[:500]}")
        results = []
        for entries in response.json()["result"]:
            hits = []
            for row, entry in enumerate(entries):
                document, score = entry.get("document", entry), float(entry.get("score", 0.0))
                title, _, text = str(document.get("contents", "")).partition("\n")
                hits.append(Hit(id=str(document.get("id", "")), row=int(document.get("row", row)),
                                title=document.get("title", title), text=document.get("text", text), score=score))
            results.append(hits)
        return results

    def close(self) -> None:
        self._session.close()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_retriever(retriever: Retriever, *, host: str = "127.0.0.1", port: int = 0, **app_options: Any) -> Iterator[str]:
    """Serve ``retriever`` on a background thread (a free port by default); yields the base URL."""
    port = port or _free_port(host)
    config = uvicorn.Config(create_retriever_app(retriever, **app_options), host=host, port=port,
                            log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"retriever-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the retrieval service did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
