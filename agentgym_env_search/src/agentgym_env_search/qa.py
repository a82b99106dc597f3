"""Question-answer data: the seven Search-R1 datasets from local files, by name.

Two layouts are understood, both as Search-R1 and FlashRAG ship them (neither can be downloaded
here, so every loader takes local paths and says what it looked for when something is missing):

* **per dataset** (FlashRAG): ``<dir>/<dataset>/<split>.jsonl`` or ``.parquet``, one record per
  question with ``question`` and ``golden_answers``. Datasets without a ``test`` file (HotpotQA,
  2WikiMultihopQA, MuSiQue publish ``dev``) fall back to ``dev`` for the test split.
* **merged** (Search-R1's ``scripts/data_process`` output): ``<dir>/train.parquet`` and
  ``<dir>/test.parquet`` (or ``.jsonl``) with a ``data_source`` column naming the dataset and the
  answers in ``golden_answers`` or ``reward_model.ground_truth.target``.

Each question's category is its dataset, so evaluation reports a score per dataset.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "SEARCH_R1_DATASETS",
    "SEARCH_R1_TRAIN_DATASETS",
    "QADataError",
    "QAItem",
    "QASet",
    "categories_of",
    "load_qa_dir",
    "load_qa_file",
]

SEARCH_R1_DATASETS: tuple[str, ...] = (
    "nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle",
)
"""The seven QA datasets of Search-R1 and AgentGym-RL's Deep Search, in their order."""

SEARCH_R1_TRAIN_DATASETS: tuple[str, ...] = ("nq", "hotpotqa")
"""The datasets Search-R1 (and the anchor) train on."""

_DATASET_ALIASES = {"2wiki": "2wikimultihopqa", "natural_questions": "nq", "trivia_qa": "triviaqa"}
_SPLIT_FALLBACKS = {"test": ("test", "dev"), "train": ("train",), "dev": ("dev",)}
_SUFFIXES = (".jsonl", ".parquet", ".json")


class QADataError(FileNotFoundError):
    """QA files are missing or malformed; the message says what was looked for."""


class QAItem(BaseModel):
    """One question with its accepted answers."""

    id: str = Field(description="The question's id in its source file.")
    question: str = Field(description="The question text shown to the agent.")
    golden_answers: list[str] = Field(description="Every accepted answer; exact match against any one wins.")
    dataset: str = Field(description="The dataset the question comes from (its category).")
    evidence_title: str | None = Field(default=None, description="Title of the passage that holds the answer, if known.")
    category: str | None = Field(default=None, description="Category for per-category metrics; default: the dataset.")


class QASet(BaseModel):
    """Questions by split; task ids are positions in ``test`` then ``train`` (the anchor's order)."""

    splits: dict[str, list[QAItem]] = Field(description="Split name -> questions in file order.")

    def ordered(self) -> list[tuple[str, QAItem]]:
        order = ["test", "train"] + sorted(set(self.splits) - {"test", "train"})
        return [(split, item) for split in order for item in self.splits.get(split, [])]


def _read_records(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise QADataError(
                f"{str(path)!r} is a parquet file and reading it needs pyarrow: pip install 'pyarrow>=12' "
                "(or convert it to JSONL)"
            ) from None
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        if isinstance(data, dict):
            data = data.get("data", data.get("questions"))
        if not isinstance(data, list):
            raise QADataError(f"{str(path)!r}: expected a JSON list of question records")
        return data
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise QADataError(f"{path}:{number}: not JSON ({exc.msg}); expected one question per line") from None
    return records


def _answers(record: dict[str, Any]) -> list[str] | None:
    for key in ("golden_answers", "answers", "answer"):
        if key in record and record[key] is not None:
            value = record[key]
            break
    else:
        ground_truth = (record.get("reward_model") or {}).get("ground_truth") or {}
        value = ground_truth.get("target")
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]  # parquet gives numpy arrays; JSON lists; both iterate


def load_qa_file(path: str | Path, *, dataset: str | None = None) -> list[QAItem]:
    """Questions of one JSONL / JSON / parquet file.

    Args:
        path: the file.
        dataset: the dataset name for every record; default: each record's ``data_source``,
            else the parent folder's name.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise QADataError(f"QA file {str(path)!r} does not exist")
    items = []
    for number, record in enumerate(_read_records(path)):
        question = record.get("question")
        answers = _answers(record)
        if not isinstance(question, str) or answers is None:
            raise QADataError(
                f"{path} record {number}: a question record needs 'question' (text) and 'golden_answers' "
                f"(list of strings; 'answers', 'answer' or reward_model.ground_truth.target also work); "
                f"it has keys {sorted(record)}"
            )
        name = dataset or record.get("data_source") or path.parent.name
        items.append(QAItem(id=str(record.get("id", number)), question=question.strip(), golden_answers=answers,
                            dataset=_DATASET_ALIASES.get(str(name), str(name))))
    return items


def _find_split_file(folder: Path, split: str) -> tuple[Path | None, list[Path]]:
    tried = []
    for name in _SPLIT_FALLBACKS.get(split, (split,)):
        for suffix in _SUFFIXES:
            candidate = folder / f"{name}{suffix}"
            tried.append(candidate)
            if candidate.is_file():
                return candidate, tried
    return None, tried


def load_qa_dir(directory: str | Path, *, test_datasets: Sequence[str] = SEARCH_R1_DATASETS,
                train_datasets: Sequence[str] = SEARCH_R1_TRAIN_DATASETS) -> QASet:
    """Load the named datasets from ``directory`` (merged or per-dataset layout, see module doc)."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise QADataError(
            f"QA directory {str(directory)!r} does not exist. It should hold either Search-R1's merged "
            f"train.parquet/test.parquet or one folder per dataset ({', '.join(SEARCH_R1_DATASETS)}) with "
            "train/dev/test .jsonl or .parquet files as in the FlashRAG_datasets collection."
        )
    wanted = {"test": [_canonical(n) for n in test_datasets], "train": [_canonical(n) for n in train_datasets]}
    merged = {split: _find_split_file(directory, split)[0] for split in wanted}
    if any(merged.values()):
        return _load_merged(directory, merged, wanted)
    splits: dict[str, list[QAItem]] = {}
    missing: list[str] = []
    for split, names in wanted.items():
        splits[split] = []
        for name in names:
            found, tried = _find_split_file(directory / name, split)
            if found is None:
                missing.append(f"{name} ({split}): tried {', '.join(str(p) for p in tried)}")
                continue
            splits[split].extend(load_qa_file(found, dataset=name))
    if missing:
        raise QADataError(
            f"missing QA files in {str(directory)!r}:\n  " + "\n  ".join(missing) + "\nPut each dataset's files "
            "there (FlashRAG layout <dataset>/<split>.jsonl), or pass test_datasets/train_datasets naming only "
            "the datasets you have."
        )
    return QASet(splits=splits)


def _canonical(name: str) -> str:
    name = _DATASET_ALIASES.get(name.lower(), name.lower())
    if name not in SEARCH_R1_DATASETS:
        raise QADataError(f"unknown dataset {name!r}; the Search-R1 datasets are {', '.join(SEARCH_R1_DATASETS)}")
    return name


def _load_merged(directory: Path, files: dict[str, Path | None], wanted: dict[str, list[str]]) -> QASet:
    splits = {}
    for split, path in files.items():
        if path is None:
            splits[split] = []
            continue
        items = load_qa_file(path)
        present = {item.dataset for item in items}
        absent = [name for name in wanted[split] if name not in present]
        if absent and split == "test":
            raise QADataError(
                f"{str(path)!r} has no questions of {', '.join(absent)} (its data_source values: "
                f"{', '.join(sorted(present))}); pass test_datasets naming only what it holds"
            )
        keep = set(wanted[split])
        splits[split] = [item for item in items if item.dataset in keep]
    return QASet(splits=splits)


def categories_of(items: Iterable[tuple[str, QAItem]]) -> dict[str, list[int]]:
    """Dataset name -> task ids, for per-dataset metrics."""
    categories: dict[str, list[int]] = {}
    for task_id, (_, item) in enumerate(items):
        categories.setdefault(item.category or item.dataset, []).append(task_id)
    return categories
