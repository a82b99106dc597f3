"""``agentgym-search``: build an index, serve the shared retriever, measure demo recall.

    agentgym-search build-index --corpus demo
    agentgym-search serve-retriever --corpus /data/wiki-18.jsonl --port 8000
    agentgym-search recall --k 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time

__all__ = ["main"]


def _build(args: argparse.Namespace) -> int:
    from agentgym_env_search.indexes import open_retriever

    started = time.perf_counter()
    retriever = open_retriever(args.corpus, args.retriever, json.loads(args.options))
    print(json.dumps({"retriever": args.retriever, "passages": retriever.num_passages,
                      "seconds": round(time.perf_counter() - started, 3)}))
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from agentgym_env_search.indexes import open_retriever
    from agentgym_env_search.service import create_retriever_app

    retriever = open_retriever(args.corpus, args.retriever, json.loads(args.options))
    app = create_retriever_app(retriever, default_topk=args.topk, max_batch=args.max_batch,
                               max_wait_ms=args.max_wait_ms)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _recall(args: argparse.Namespace) -> int:
    from agentgym_env_search.demo import demo_qa
    from agentgym_env_search.indexes import open_retriever
    from agentgym_env_search.recall import evidence_recall

    retriever = open_retriever("demo", args.retriever, json.loads(args.options))
    print(json.dumps(evidence_recall(retriever, demo_qa().splits[args.split], args.k), indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentgym-search", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser, corpus: bool = True) -> None:
        if corpus:
            sub.add_argument("--corpus", default="demo", help="'demo' or a Search-R1/FlashRAG JSONL corpus path")
        sub.add_argument("--retriever", default="bm25", help="registered retriever name")
        sub.add_argument("--options", default="{}", help="retriever options as JSON, e.g. '{\"k1\": 1.2}'")

    build = commands.add_parser("build-index", help="build (or load) the cached index of a corpus")
    common(build)
    build.set_defaults(func=_build)
    serve = commands.add_parser("serve-retriever", help="serve POST /retrieve for env servers to share")
    common(serve)
    serve.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--topk", type=int, default=3, help="passages per query when a request gives none")
    serve.add_argument("--max-batch", type=int, default=64, help="queries merged into one retriever call")
    serve.add_argument("--max-wait-ms", type=float, default=0.0,
                       help="how long a query waits for batch company (0: batch only what already queued)")
    serve.set_defaults(func=_serve)
    recall = commands.add_parser("recall", help="evidence recall@k on the offline demo questions")
    common(recall, corpus=False)
    recall.add_argument("--k", type=int, default=3)
    recall.add_argument("--split", default="test", choices=["test", "train"])
    recall.set_defaults(func=_recall)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
