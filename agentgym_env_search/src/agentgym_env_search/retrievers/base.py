"""The one interface every retriever implements, and the registry retrievers are found in.

A retriever answers a batch of queries with the top-k passages of one corpus. The BM25 and
dense retrievers, and :class:`~agentgym_env_search.service.RemoteRetriever` (the client of the
shared retrieval service), all implement :class:`Retriever`, so the environment cannot tell an
in-process index from a service shared by many environment servers.

Third-party retrievers register a factory under a name, either by calling
:func:`register_retriever` or through the entry-point group ``agentgym_search.retrievers``
(``name = "package.module:factory"``); a factory is called as
``factory(corpus, index_dir=..., **options)`` and returns a :class:`Retriever`.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agentgym_env_search.corpus import Corpus

__all__ = [
    "RETRIEVER_ENTRY_POINT_GROUP",
    "Hit",
    "Retriever",
    "RetrieverFactory",
    "UnknownRetrieverError",
    "available_retrievers",
    "get_retriever_factory",
    "register_retriever",
]

RETRIEVER_ENTRY_POINT_GROUP = "agentgym_search.retrievers"


class Hit(BaseModel):
    """One retrieved passage with its score (higher is better)."""

    id: str = Field(description="The passage's id in the corpus file.")
    row: int = Field(description="The passage's row number in the corpus file.")
    title: str = Field(description="The passage title (first line of 'contents').")
    text: str = Field(description="The passage text (rest of 'contents').")
    score: float = Field(description="The retriever's score; comparable only within one query.")

    @property
    def contents(self) -> str:
        return f"{self.title}\n{self.text}"


class Retriever(ABC):
    """Top-k passage search over one corpus. Implementations must be thread-safe for ``search``."""

    name: str = ""

    @abstractmethod
    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """The top-``k`` hits of each query, best first (fewer when the corpus is smaller)."""

    @property
    @abstractmethod
    def num_passages(self) -> int:
        """How many passages the corpus holds."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release memory maps, files and connections. Idempotent."""


RetrieverFactory = Callable[..., Retriever]
"""``factory(corpus: Corpus, *, index_dir: Path, **options) -> Retriever``."""


class UnknownRetrieverError(KeyError):
    """No retriever is registered under the requested name."""

    def __str__(self) -> str:
        return str(self.args[0])


_FACTORIES: dict[str, RetrieverFactory] = {}
_SUMMARIES: dict[str, str] = {}


def register_retriever(name: str, factory: RetrieverFactory, *, summary: str = "") -> None:
    """Make ``factory`` available as retriever ``name`` (a later registration replaces it)."""
    _FACTORIES[name] = factory
    _SUMMARIES[name] = summary


def _load_entry_points() -> None:
    for entry_point in metadata.entry_points(group=RETRIEVER_ENTRY_POINT_GROUP):
        if entry_point.name not in _FACTORIES:
            register_retriever(entry_point.name, entry_point.load())


def available_retrievers() -> dict[str, str]:
    """Registered retriever names -> one-line summaries (builtins plus entry points)."""
    _load_entry_points()
    return dict(sorted(_SUMMARIES.items()))


def get_retriever_factory(name: str) -> RetrieverFactory:
    """The factory registered under ``name``; a teaching error when there is none."""
    if name not in _FACTORIES:
        _load_entry_points()
    if name in _FACTORIES:
        return _FACTORIES[name]
    known = sorted(_FACTORIES)
    close = difflib.get_close_matches(name, known, n=2)
    hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise UnknownRetrieverError(
        f"unknown retriever {name!r}.{hint} Registered retrievers: {', '.join(known)}. A package can add one "
        f"through the entry-point group {RETRIEVER_ENTRY_POINT_GROUP!r}."
    )


def hits_from_rows(corpus: Corpus, rows: Sequence[int], scores: Sequence[float]) -> list[Hit]:
    """Turn row numbers and scores into hits, reading the passages from the corpus."""
    hits = []
    for row, score in zip(rows, scores, strict=True):
        passage = corpus[int(row)]
        hits.append(Hit(id=passage.id, row=int(row), title=passage.title, text=passage.text, score=float(score)))
    return hits


def index_ready(index_dir: Path, marker: str = "COMPLETE") -> bool:
    """An index folder is usable only once its builder wrote the completion marker last."""
    return (index_dir / marker).is_file()


def mark_index_complete(index_dir: Path, info: dict[str, Any], marker: str = "COMPLETE") -> None:
    import json

    (index_dir / marker).write_text(json.dumps(info, indent=1))
