"""BM25 retrieval with ``bm25s``: the default retriever, fast on CPU and needing no model.

The index is built by streaming the corpus through a ``bm25s`` tokenizer (English stopwords,
Snowball stemmer when PyStemmer is installed) and saved as ``bm25s`` sparse arrays, which are
memory-mapped when loaded, so a saved index opens in milliseconds and shares pages between
processes.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from bm25s.tokenization import Tokenizer
from pydantic import BaseModel, ConfigDict, Field

from agentgym_env_search.corpus import Corpus
from agentgym_env_search.retrievers.base import (
    Hit,
    Retriever,
    hits_from_rows,
    index_ready,
    mark_index_complete,
)

__all__ = ["BM25Options", "BM25Retriever", "make_bm25_retriever"]


class BM25Options(BaseModel):
    """Options of the BM25 retriever (``retriever_options`` in the env config)."""

    model_config = ConfigDict(extra="forbid")

    k1: float = Field(1.5, description="BM25 term-frequency saturation.")
    b: float = Field(0.75, description="BM25 length normalisation.")
    method: str = Field("lucene", description="bm25s scoring variant: lucene, robertson, atire, bm25l, bm25+.")
    stemmer: str | None = Field("english", description="Snowball stemmer language (PyStemmer); None to disable.")
    stopwords: str = Field("en", description="Stopword list passed to bm25s ('en' or '' for none).")
    n_threads: int = Field(0, ge=0, description="Threads bm25s uses per batch (0 = the calling thread).")
    mmap: bool = Field(True, description="Memory-map the saved index instead of reading it into memory.")


def _stemmer(language: str | None) -> Any:
    if not language:
        return None
    try:
        import Stemmer
    except ImportError:  # bm25s works without stemming; recall is a little lower
        return None
    return Stemmer.Stemmer(language)


class BM25Retriever(Retriever):
    """BM25 over a :class:`Corpus`; build with :meth:`build`, open a saved one with :meth:`load`."""

    name = "bm25"

    def __init__(self, corpus: Corpus, model: bm25s.BM25, tokenizer: Tokenizer, options: BM25Options) -> None:
        self.corpus = corpus
        self._model = model
        self._tokenizer = tokenizer
        self._options = options
        # The tokenizer is not documented as thread-safe (it memoises words); queries are
        # cheap to tokenize, so serialising that part costs little.
        self._tokenize_lock = threading.Lock()

    @property
    def num_passages(self) -> int:
        return len(self.corpus)

    @staticmethod
    def _new_tokenizer(options: BM25Options) -> Tokenizer:
        return Tokenizer(stopwords=options.stopwords or [], stemmer=_stemmer(options.stemmer))

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, options: BM25Options | None = None, *,
              show_progress: bool = True) -> dict[str, float]:
        """Index ``corpus`` into ``index_dir``; returns timings in seconds."""
        options = options or BM25Options()
        index_dir = Path(index_dir)
        if index_dir.exists():
            shutil.rmtree(index_dir)  # a half-written folder from an interrupted build
        index_dir.mkdir(parents=True)
        tokenizer = cls._new_tokenizer(options)
        started = time.perf_counter()
        ids = tokenizer.tokenize(corpus.iter_texts(show_progress=False), update_vocab=True, return_as="ids",
                                 length=len(corpus), show_progress=show_progress)
        tokenized = time.perf_counter()
        model = bm25s.BM25(k1=options.k1, b=options.b, method=options.method)
        model.index(tokenizer.to_tokenized_tuple(ids), show_progress=show_progress)
        indexed = time.perf_counter()
        model.save(str(index_dir), show_progress=False)
        tokenizer.save_vocab(str(index_dir))
        timings = {"tokenize_s": tokenized - started, "index_s": indexed - tokenized,
                   "save_s": time.perf_counter() - indexed}
        mark_index_complete(index_dir, {"retriever": "bm25", "passages": len(corpus),
                                        "options": options.model_dump(), **timings})
        return timings

    @classmethod
    def load(cls, corpus: Corpus, index_dir: Path, options: BM25Options | None = None, *,
             show_progress: bool = True) -> BM25Retriever:
        """Open an index written by :meth:`build` (memory-mapped unless ``options.mmap`` is off)."""
        options = options or BM25Options()
        index_dir = Path(index_dir)
        if not index_ready(index_dir):
            raise FileNotFoundError(f"no complete BM25 index in {str(index_dir)!r}; build it with BM25Retriever.build")
        saved = json.loads((index_dir / "COMPLETE").read_text())
        if saved.get("passages") != len(corpus):
            raise ValueError(
                f"the BM25 index in {str(index_dir)!r} covers {saved.get('passages')} passages but the corpus has "
                f"{len(corpus)}; delete the folder to rebuild it"
            )
        # Query tokenization must match what the index was built with, whatever the caller passes now.
        built_with = BM25Options(**saved["options"])
        options = options.model_copy(update={"stemmer": built_with.stemmer, "stopwords": built_with.stopwords})
        model = bm25s.BM25.load(str(index_dir), mmap=options.mmap, show_progress=show_progress)
        tokenizer = cls._new_tokenizer(options)
        tokenizer.load_vocab(str(index_dir))
        return cls(corpus, model, tokenizer, options)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        k = max(1, min(int(k), self.num_passages))
        with self._tokenize_lock:
            query_ids = self._tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids",
                                                 show_progress=False)
        rows, scores = self._model.retrieve(query_ids, k=k, show_progress=False, n_threads=self._options.n_threads)
        results = []
        for row_list, score_list in zip(np.asarray(rows), np.asarray(scores), strict=True):
            keep = score_list > 0  # a zero score means no query term matched: not a result
            results.append(hits_from_rows(self.corpus, row_list[keep], score_list[keep]))
        return results

    def close(self) -> None:
        self._model = None  # drops the memory maps
        self.corpus.close()


def make_bm25_retriever(corpus: Corpus, *, index_dir: Path, show_progress: bool = True,
                        **options: Any) -> BM25Retriever:
    """Registry factory: load the index in ``index_dir``, building it first if it is missing."""
    bm25_options = BM25Options(**options)
    index_dir = Path(index_dir)
    if not index_ready(index_dir):
        # Build beside the target and rename: two processes starting at once (several env servers
        # sharing a cache) never read each other's half-written files.
        scratch = index_dir.with_name(f"{index_dir.name}.building-{os.getpid()}")
        BM25Retriever.build(corpus, scratch, bm25_options, show_progress=show_progress)
        try:
            os.rename(scratch, index_dir)
        except OSError:  # another process finished first; its index is as good as ours
            shutil.rmtree(scratch, ignore_errors=True)
    return BM25Retriever.load(corpus, Path(index_dir), bm25_options, show_progress=show_progress)
