"""Search env retrieval bench: index build time and retrieval-service throughput.

Builds a synthetic Search-R1-format corpus (Zipf-distributed vocabulary, ~40 tokens a passage),
indexes it with the default BM25 retriever, then serves it with ``agentgym-search
serve-retriever`` in a separate process on 127.0.0.1 and measures queries per second:

* in-process ``search`` one query at a time and in batches (the ceiling);
* over HTTP, one query per request from 1 client and from N concurrent clients (the service
  merges concurrent requests into batches), and 64 queries per request;
* the offline demo: BM25 recall@3 of the evidence article.

    python bench/search.py [--passages 100000] [--queries 2000]

Prints a table and writes bench/results/search.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests


def synthetic_corpus(path: Path, passages: int, seed: int = 0) -> list[str]:
    """Write ``passages`` JSONL passages; return one query per passage (a snippet of it)."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "tu", "sa", "vor", "el", "qui", "dan", "po", "ri", "ne", "zu", "ta"]
    vocabulary = sorted({"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(40_000)})
    rng.shuffle(vocabulary)
    # Zipf-like word frequencies; cumulative weights once, or choices() re-sums 40k weights per call.
    cumulative = list(itertools.accumulate(1 / (rank + 1) ** 1.05 for rank in range(len(vocabulary))))
    queries = []
    with open(path, "w") as out:
        for row in range(passages):
            words = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(20, 60))
            title = " ".join(words[:2]).title()
            out.write(json.dumps({"id": str(row), "contents": f"{title}\n{' '.join(words[2:])}"}) + "\n")
            if len(queries) < 20_000:
                start = rng.randint(2, max(2, len(words) - 8))
                queries.append(" ".join(words[start:start + 6]))
    return queries


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else float("inf")


def wait_for(url: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the retrieval service exited with {process.returncode}")
        try:
            if requests.get(f"{url}/health", timeout=1).ok:
                return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise TimeoutError("the retrieval service did not come up")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=2000, help="queries per measurement")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients for the merged-batch figure")
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="agentgym-search-bench-"))
    os.environ["AGENTGYM_CACHE"] = str(work / "cache")
    from agentgym_env_search.demo import demo_qa
    from agentgym_env_search.indexes import open_retriever
    from agentgym_env_search.recall import evidence_recall

    results: dict = {"machine": f"{platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}",
                     "passages": args.passages, "k": args.k}
    corpus_path = work / "synthetic.jsonl"
    started = time.perf_counter()
    queries = synthetic_corpus(corpus_path, args.passages)
    results["corpus_write_s"] = round(time.perf_counter() - started, 2)
    results["corpus_mb"] = round(corpus_path.stat().st_size / 1e6, 1)
    queries = (queries * (args.queries // len(queries) + 1))[:args.queries]

    started = time.perf_counter()
    retriever = open_retriever(corpus_path, "bm25", show_progress=False)
    results["index_build_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    retriever = open_retriever(corpus_path, "bm25", show_progress=False)
    results["index_load_mmap_s"] = round(time.perf_counter() - started, 3)

    # Sanity: a snippet of a passage should retrieve that passage.
    found = sum(hits and hits[0].row == row for row, hits in enumerate(retriever.search(queries[:200], args.k)))
    results["self_retrieval_top1_of_200"] = int(found)

    started = time.perf_counter()
    for query in queries:
        retriever.search([query], args.k)
    results["inprocess_single_qps"] = rate(len(queries), time.perf_counter() - started)
    started = time.perf_counter()
    for start in range(0, len(queries), 64):
        retriever.search(queries[start:start + 64], args.k)
    results["inprocess_batch64_qps"] = rate(len(queries), time.perf_counter() - started)

    port = 18000 + os.getpid() % 1000
    url = f"http://127.0.0.1:{port}"
    service = subprocess.Popen([sys.executable, "-m", "agentgym_env_search", "serve-retriever", "--corpus",
                                str(corpus_path), "--host", "127.0.0.1", "--port", str(port)], env=os.environ.copy())
    try:
        wait_for(url, service)
        session = requests.Session()

        def ask(batch: list[str]) -> None:
            response = session.post(f"{url}/retrieve", json={"queries": batch, "topk": args.k}, timeout=60)
            response.raise_for_status()

        started = time.perf_counter()
        for query in queries:
            ask([query])
        results["service_single_1client_qps"] = rate(len(queries), time.perf_counter() - started)

        sessions = [requests.Session() for _ in range(args.clients)]

        def client(index: int) -> None:
            for query in queries[index::args.clients]:
                sessions[index].post(f"{url}/retrieve", json={"queries": [query], "topk": args.k},
                                     timeout=60).raise_for_status()

        before = requests.get(f"{url}/health", timeout=10).json()
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(client, range(args.clients)))
        elapsed = time.perf_counter() - started
        after = requests.get(f"{url}/health", timeout=10).json()
        results[f"service_single_{args.clients}clients_qps"] = rate(len(queries), elapsed)
        results["service_mean_merged_batch"] = round(
            (after["queries"] - before["queries"]) / max(1, after["batches"] - before["batches"]), 2)

        started = time.perf_counter()
        for start in range(0, len(queries), 64):
            ask(queries[start:start + 64])
        results["service_batch64_qps"] = rate(len(queries), time.perf_counter() - started)
    finally:
        service.terminate()
        service.wait(timeout=10)

    demo = open_retriever("demo", "bm25", show_progress=False)
    for k in (1, 3, 5):
        report = evidence_recall(demo, demo_qa().splits["test"], k)
        results[f"demo_recall@{k}"] = round(report["recall"], 3)
    results["demo_questions"] = report["questions"]

    width = max(map(len, results))
    for key, value in results.items():
        print(f"{key:<{width}}  {value}")
    out = Path(__file__).parent / "results" / "search.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
