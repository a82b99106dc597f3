import concurrent.futures

import requests

from agentgym_env_search.indexes import open_retriever
from agentgym_env_search.service import RemoteRetriever, serve_retriever


def test_round_trip_matches_the_in_process_retriever(toy_corpus):
    local = open_retriever(toy_corpus, show_progress=False)
    queries = ["capital of France", "highest mountain", "zzqx"]
    with serve_retriever(local) as url:
        remote = RemoteRetriever(url)
        assert remote.num_passages == 6
        assert remote.search(queries, 2) == local.search(queries, 2)
        # Search-R1's own request/response shape, as its clients send it.
        plain = requests.post(f"{url}/retrieve", json={"queries": ["highest mountain"], "topk": 1}, timeout=10).json()
        assert plain["result"][0][0]["contents"].startswith("Mount Everest\n")
        scored = requests.post(f"{url}/retrieve", json={"queries": ["highest mountain"], "topk": 1,
                                                        "return_scores": True}, timeout=10).json()
        assert scored["result"][0][0]["document"]["id"] == "2" and scored["result"][0][0]["score"] > 0
        bad = requests.post(f"{url}/retrieve", json={"query": "x"}, timeout=10)
        assert bad.status_code == 422


def test_concurrent_requests_are_batched_and_answered_separately(toy_corpus):
    local = open_retriever(toy_corpus, show_progress=False)
    questions = {"capital of France": "Paris", "capital of Germany": "Berlin", "largest planet": "Jupiter",
                 "river discharge": "Amazon River", "highest mountain": "Mount Everest"}
    with serve_retriever(local, max_wait_ms=20) as url:
        remote = RemoteRetriever(url)
        work = list(questions.items()) * 8
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda qa: remote.search([qa[0]], 1 + len(qa[0]) % 3)[0], work))
        for (query, title), hits in zip(work, answers, strict=True):
            assert hits[0].title == title and len(hits) <= 1 + len(query) % 3
        health = requests.get(f"{url}/health", timeout=10).json()
    assert health["queries"] == len(work)
    assert health["batches"] < len(work)  # concurrent single-query requests shared retriever calls
