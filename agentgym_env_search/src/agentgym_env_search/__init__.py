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

from agentgym_core.plugins import lazy_exports

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

# Loaded on first use, so that importing the plugin module (for `agentgym plugins`, or a server of
# another env) does not import this package's dependencies.
lazy_exports(__name__, {
    "SEARCH_R1_DATASETS": "agentgym_env_search.qa",
    "BM25Retriever": "agentgym_env_search.retrievers",
    "Corpus": "agentgym_env_search.corpus",
    "CorpusFormatError": "agentgym_env_search.corpus",
    "Hit": "agentgym_env_search.retrievers",
    "Passage": "agentgym_env_search.corpus",
    "QADataError": "agentgym_env_search.qa",
    "QAItem": "agentgym_env_search.qa",
    "QASet": "agentgym_env_search.qa",
    "RemoteRetriever": "agentgym_env_search.service",
    "Retriever": "agentgym_env_search.retrievers",
    "SearchEnv": "agentgym_env_search.env",
    "SearchEnvConfig": "agentgym_env_search.env",
    "available_retrievers": "agentgym_env_search.retrievers",
    "best_f1": "agentgym_env_search.scoring",
    "cache_root": "agentgym_env_search.corpus",
    "create_retriever_app": "agentgym_env_search.service",
    "demo_corpus_path": "agentgym_env_search.demo",
    "demo_qa": "agentgym_env_search.demo",
    "exact_match": "agentgym_env_search.scoring",
    "format_information": "agentgym_env_search.protocol",
    "get_retriever_factory": "agentgym_env_search.retrievers",
    "load_qa_dir": "agentgym_env_search.qa",
    "load_qa_file": "agentgym_env_search.qa",
    "normalize_answer": "agentgym_env_search.scoring",
    "open_retriever": "agentgym_env_search.indexes",
    "parse_search_action": "agentgym_env_search.protocol",
    "register_retriever": "agentgym_env_search.retrievers",
    "serve_retriever": "agentgym_env_search.service",
    "shared_retriever": "agentgym_env_search.indexes",
})
