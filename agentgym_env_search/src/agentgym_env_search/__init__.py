"""agentgym-env-search: Search-R1-style retrieval QA (the "Deep Search" scenario) for agentgym.

Public names:
    SearchEnv, SearchEnvConfig          the environment and its options
    Retriever, Hit, BM25Retriever, register_retriever, get_retriever_factory, available_retrievers
    open_retriever, shared_retriever    build-or-load a cached index over a corpus
    create_retriever_app, serve_retriever, RemoteRetriever   the shared retrieval service
    Corpus, Passage                     memory-mapped Search-R1/FlashRAG JSONL corpora
    load_qa_dir, load_qa_file, QAItem, QASet, SEARCH_R1_DATASETS   QA data by name from local files
    demo_qa, demo_corpus_path           the offline demo data
    normalize_answer, exact_match, best_f1   scoring
"""

from agentgym_env_search.corpus import Corpus, CorpusFormatError, Passage, cache_root
from agentgym_env_search.demo import demo_corpus_path, demo_qa
from agentgym_env_search.env import SearchEnv, SearchEnvConfig
from agentgym_env_search.indexes import open_retriever, shared_retriever
from agentgym_env_search.protocol import format_information, parse_search_action
from agentgym_env_search.qa import SEARCH_R1_DATASETS, QADataError, QAItem, QASet, load_qa_dir, load_qa_file
from agentgym_env_search.retrievers import (
    BM25Retriever,
    Hit,
    Retriever,
    available_retrievers,
    get_retriever_factory,
    register_retriever,
)
from agentgym_env_search.scoring import best_f1, exact_match, normalize_answer
from agentgym_env_search.service import RemoteRetriever, create_retriever_app, serve_retriever

__all__ = [
    "SEARCH_R1_DATASETS",
    "BM25Retriever",
    "Corpus",
    "CorpusFormatError",
    "Hit",
    "Passage",
    "QADataError",
    "QAItem",
    "QASet",
    "RemoteRetriever",
    "Retriever",
    "SearchEnv",
    "SearchEnvConfig",
    "available_retrievers",
    "best_f1",
    "cache_root",
    "create_retriever_app",
    "demo_corpus_path",
    "demo_qa",
    "exact_match",
    "format_information",
    "get_retriever_factory",
    "load_qa_dir",
    "load_qa_file",
    "normalize_answer",
    "open_retriever",
    "parse_search_action",
    "register_retriever",
    "serve_retriever",
    "shared_retriever",
]
