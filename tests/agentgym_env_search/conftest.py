"""Fixtures for the search env tests: a private index cache and a small FlashRAG-style dataset."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def search_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Indexes built by these tests go to a temporary cache, never the user's ~/.cache."""
    cache = tmp_path_factory.mktemp("agentgym-cache")
    previous = os.environ.get("AGENTGYM_CACHE")
    os.environ["AGENTGYM_CACHE"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("AGENTGYM_CACHE", None)
    else:
        os.environ["AGENTGYM_CACHE"] = previous


TOY_PASSAGES = [
    ("Paris", "Paris is the capital and largest city of France, on the Seine."),
    ("Berlin", "Berlin is the capital of Germany and its largest city by population."),
    ("Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    ("Python (programming language)", "Python is a programming language created by Guido van Rossum."),
    ("Amazon River", "The Amazon River in South America is the largest river by discharge volume."),
    ("Jupiter", "Jupiter is the fifth planet from the Sun and the largest in the Solar System."),
]


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Search-R1-format corpus of six passages (with a blank line, as real dumps sometimes have)."""
    path = tmp_path_factory.mktemp("corpus") / "toy.jsonl"
    lines = [json.dumps({"id": str(i), "contents": f"{title}\n{text}"}) for i, (title, text) in enumerate(TOY_PASSAGES)]
    lines.insert(3, "")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def toy_qa_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FlashRAG layout: nq/test.jsonl, hotpotqa/dev.jsonl (no test: falls back), nq/train.jsonl."""
    root = tmp_path_factory.mktemp("qa")

    def write(dataset: str, split: str, rows: list[tuple[str, list[str]]]) -> None:
        (root / dataset).mkdir(exist_ok=True)
        (root / dataset / f"{split}.jsonl").write_text("".join(
            json.dumps({"id": f"{dataset}-{split}-{i}", "question": q, "golden_answers": a}) + "\n"
            for i, (q, a) in enumerate(rows)))

    write("nq", "test", [("What is the capital of France?", ["Paris"]),
                         ("Who created the Python programming language?", ["Guido van Rossum", "van Rossum"])])
    write("hotpotqa", "dev", [("Which is the largest planet in the Solar System?", ["Jupiter"])])
    write("nq", "train", [("What is the capital of Germany?", ["Berlin"])])
    write("hotpotqa", "train", [("Which river has the largest discharge volume?", ["Amazon River", "Amazon"])])
    return root
