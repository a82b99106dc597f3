"""Where a corpus's indexes live, and one shared retriever per (corpus, retriever) per process.

Indexes are cached under ``$AGENTGYM_CACHE/search/indexes/<corpus>-<fingerprint>/<retriever>-<options>``
(default cache: ``~/.cache/agentgym``), built on first use and memory-mapped afterwards. All
environment instances of one process that name the same corpus and retriever share one
retriever object, so an env server with 64 instances holds one index, not 64.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

from agentgym_env_search.corpus import Corpus, cache_root, file_fingerprint
from agentgym_env_search.retrievers import Retriever, get_retriever_factory

__all__ = ["index_dir_for", "open_retriever", "resolve_corpus_path", "shared_retriever"]

DEMO_CORPUS = "demo"


def resolve_corpus_path(corpus: str | Path) -> Path:
    """``"demo"`` -> the cached demo JSONL (converted on first use); anything else is a path."""
    if str(corpus) == DEMO_CORPUS:
        from agentgym_env_search.demo import demo_corpus_path

        return demo_corpus_path()
    return Path(corpus).expanduser()


def _corpus_key(path: Path) -> str:
    return f"{path.stem}-{file_fingerprint(path)}"


def index_dir_for(corpus_path: Path, retriever: str, options: dict[str, Any]) -> Path:
    """The cache folder of one retriever's index over one corpus file with given options."""
    digest = hashlib.sha1(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return cache_root() / "search" / "indexes" / _corpus_key(corpus_path) / f"{retriever}-{digest}"


def open_retriever(corpus: str | Path, retriever: str = "bm25", options: dict[str, Any] | None = None, *,
                   show_progress: bool = True) -> Retriever:
    """A new retriever over ``corpus``, building its index first if the cache lacks it."""
    options = dict(options or {})
    corpus_path = resolve_corpus_path(corpus)
    opened = Corpus(corpus_path, offsets_path=cache_root() / "search" / "indexes" / _corpus_key(corpus_path)
                    / "offsets.npy", show_progress=show_progress) if corpus_path.is_file() else Corpus(corpus_path)
    factory = get_retriever_factory(retriever)
    # Options that change only how a built index is searched do not make a new index folder.
    index_options = {k: v for k, v in options.items() if k not in ("n_threads", "mmap", "device", "batch_size", "use_faiss")}
    return factory(opened, index_dir=index_dir_for(corpus_path, retriever, index_options),
                   show_progress=show_progress, **options)


_SHARED: dict[str, Retriever] = {}
_SHARED_LOCK = threading.Lock()


def shared_retriever(corpus: str | Path, retriever: str = "bm25", options: dict[str, Any] | None = None, *,
                     show_progress: bool = True) -> Retriever:
    """The process-wide retriever for (corpus, retriever, options), opened on first request."""
    key = json.dumps([str(resolve_corpus_path(corpus)), retriever, options or {}], sort_keys=True, default=str)
    with _SHARED_LOCK:  # held while building: a second env must wait for the index, not build it again
        if key not in _SHARED:
            _SHARED[key] = open_retriever(corpus, retriever, options, show_progress=show_progress)
        return _SHARED[key]
