"""Retrievers behind one interface; ``bm25`` is built in, ``dense`` when its packages exist."""

from agentgym_env_search.retrievers.base import (
    RETRIEVER_ENTRY_POINT_GROUP,
    Hit,
    Retriever,
    RetrieverFactory,
    UnknownRetrieverError,
    available_retrievers,
    get_retriever_factory,
    register_retriever,
)
from agentgym_env_search.retrievers.bm25 import BM25Options, BM25Retriever, make_bm25_retriever

register_retriever("bm25", make_bm25_retriever, summary="BM25 (bm25s), memory-mapped sparse index; the default.")

__all__ = [
    "RETRIEVER_ENTRY_POINT_GROUP",
    "BM25Options",
    "BM25Retriever",
    "Hit",
    "Retriever",
    "RetrieverFactory",
    "UnknownRetrieverError",
    "available_retrievers",
    "get_retriever_factory",
    "make_bm25_retriever",
    "register_retriever",
]
