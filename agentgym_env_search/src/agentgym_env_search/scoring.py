"""Answer scoring for open-domain QA: exact match after normalisation, and token F1.

The normalisation is the one of the SQuAD evaluation script, used by Search-R1 and FlashRAG:
lowercase, drop punctuation, drop the articles "a", "an", "the", collapse whitespace. A
prediction is scored against every golden answer and the best score wins.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = ["best_f1", "exact_match", "f1_score", "normalize_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, strip punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golden_answers: str | Sequence[str]) -> bool:
    """True when the normalised prediction equals any normalised golden answer."""
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    predicted = normalize_answer(prediction)
    return any(predicted == normalize_answer(gold) for gold in golden_answers)


def f1_score(prediction: str, gold: str) -> float:
    """Token-level F1 between two normalised strings (0.0 when either is empty)."""
    predicted_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    common = Counter(predicted_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def best_f1(prediction: str, golden_answers: str | Sequence[str]) -> float:
    """The best token F1 of the prediction against any golden answer."""
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    return max((f1_score(prediction, gold) for gold in golden_answers), default=0.0)
