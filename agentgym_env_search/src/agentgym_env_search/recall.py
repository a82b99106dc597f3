"""Retrieval quality: how often the evidence passage of a question is among the top-k hits."""

from __future__ import annotations

from collections.abc import Sequence

from agentgym_env_search.qa import QAItem
from agentgym_env_search.retrievers import Retriever

__all__ = ["evidence_recall"]


def evidence_recall(retriever: Retriever, items: Sequence[QAItem], k: int = 3, *, batch_size: int = 256) -> dict:
    """Recall@k of ``evidence_title`` when searching with the question text itself.

    Returns ``{"k", "questions", "hits", "recall", "by_category"}``; questions without an
    evidence title are skipped.
    """
    scored = [item for item in items if item.evidence_title]
    hits = 0
    by_category: dict[str, list[int]] = {}
    for start in range(0, len(scored), batch_size):
        batch = scored[start:start + batch_size]
        results = retriever.search([item.question for item in batch], k)
        for item, found in zip(batch, results, strict=True):
            hit = any(h.title == item.evidence_title for h in found)
            hits += hit
            counts = by_category.setdefault(item.category or item.dataset, [0, 0])
            counts[0] += hit
            counts[1] += 1
    return {"k": k, "questions": len(scored), "hits": hits, "recall": hits / len(scored) if scored else 0.0,
            "by_category": {name: h / n for name, (h, n) in sorted(by_category.items())}}
