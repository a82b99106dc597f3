"""Passage corpora in the Search-R1 / FlashRAG format, read lazily from a memory-mapped file.

A corpus is a JSONL file, one passage per line, with an ``id`` and ``contents`` holding
``"title\\ntext"`` (Search-R1's ``wiki-18.jsonl``); lines that carry ``title`` and ``text``
fields instead are accepted too. The file is never loaded whole: a line-offset table is built
once (with a progress bar), saved next to the index as ``offsets.npy`` and memory-mapped, and
the passages a search returns are parsed on demand from the memory-mapped file. That keeps a
21 M-passage corpus usable without holding its 13 GB in memory.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

__all__ = ["Corpus", "CorpusFormatError", "Passage", "cache_root", "file_fingerprint"]


class CorpusFormatError(ValueError):
    """A corpus file is missing or a line of it is not a passage."""


@dataclass(frozen=True)
class Passage:
    """One retrievable passage."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The Search-R1 ``contents`` field: title, newline, text."""
        return f"{self.title}\n{self.text}"


def cache_root() -> Path:
    """Where indexes and converted corpora live: ``$AGENTGYM_CACHE`` or ``~/.cache/agentgym``."""
    root = os.environ.get("AGENTGYM_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "agentgym"


def file_fingerprint(path: Path) -> str:
    """A short key that changes when the file changes (path, size, mtime), for cache folders."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def parse_passage(line: bytes | str, *, where: str = "") -> Passage:
    """Parse one corpus line (``{id, contents}`` or ``{id, title, text}``)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusFormatError(f"{where}: not a JSON object ({exc.msg}); expected one passage per line") from None
    if not isinstance(record, dict):
        raise CorpusFormatError(f"{where}: expected a JSON object per line, got {type(record).__name__}")
    passage_id = str(record.get("id", ""))
    if "contents" in record:
        title, _, text = str(record["contents"]).partition("\n")
    elif "text" in record:
        title, text = str(record.get("title", "")), str(record["text"])
    else:
        raise CorpusFormatError(
            f"{where}: a passage needs 'contents' (\"title\\ntext\", the Search-R1/FlashRAG format) "
            f"or 'title' and 'text'; this line has keys {sorted(record)}"
        )
    return Passage(passage_id, title, text)


class Corpus:
    """A JSONL passage file opened for random access by row number.

    Args:
        path: the JSONL corpus.
        offsets_path: where the line-offset table is (or will be) saved; default: next to the
            file as ``<name>.offsets.npy`` if that folder is writable, else in the cache.
        show_progress: show a progress bar while the offset table is built.
    """

    def __init__(self, path: str | Path, *, offsets_path: str | Path | None = None,
                 show_progress: bool = True) -> None:
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise CorpusFormatError(
                f"corpus file {str(self.path)!r} does not exist. Pass the path of a Search-R1/FlashRAG "
                "JSONL corpus (one {\"id\", \"contents\": \"title\\ntext\"} per line), e.g. wiki-18.jsonl, "
                "or use corpus='demo' for the bundled offline Wikipedia summaries."
            )
        if offsets_path is None:
            offsets_path = cache_root() / "search" / "offsets" / f"{self.path.stem}-{file_fingerprint(self.path)}.npy"
        self.offsets_path = Path(offsets_path)
        if not self.offsets_path.is_file():
            self._build_offsets(show_progress)
        # (N + 1,) int64 byte offsets; row i spans offsets[i]:offsets[i + 1].
        self._offsets = np.load(self.offsets_path, mmap_mode="r")
        self._file = open(self.path, "rb")  # noqa: SIM115 - held for the mmap's lifetime
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if self.path.stat().st_size else None

    def _build_offsets(self, show_progress: bool) -> None:
        offsets = [0]
        size = self.path.stat().st_size
        with open(self.path, "rb") as handle, tqdm(
            total=size, unit="B", unit_scale=True, desc=f"indexing lines of {self.path.name}",
            disable=not show_progress, leave=False,
        ) as bar:
            position = 0
            for line in handle:
                position += len(line)
                bar.update(len(line))
                if line.strip():
                    offsets.append(position)
                else:  # blank lines carry no passage: fold them into the previous row's span
                    offsets[-1] = position
        self.offsets_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.offsets_path.with_suffix(".tmp.npy")
        np.save(tmp, np.asarray(offsets, dtype=np.int64))
        os.replace(tmp, self.offsets_path)  # atomic: a concurrent reader never sees half a table

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def raw_line(self, row: int) -> bytes:
        if not 0 <= row < len(self):
            raise IndexError(f"passage row {row} out of range; the corpus has {len(self)} passages")
        assert self._map is not None
        return self._map[int(self._offsets[row]):int(self._offsets[row + 1])]

    def __getitem__(self, row: int) -> Passage:
        return parse_passage(self.raw_line(row), where=f"{self.path.name} row {row}")

    def __iter__(self) -> Iterator[Passage]:
        for row in range(len(self)):
            yield self[row]

    def iter_texts(self, *, show_progress: bool = True, desc: str = "reading passages") -> Iterator[str]:
        """``"title text"`` of every passage in order, what the retrievers index."""
        for row in tqdm(range(len(self)), desc=desc, disable=not show_progress, leave=False):
            passage = self[row]
            yield f"{passage.title} {passage.text}"

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        self._file.close()

    def __enter__(self) -> Corpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
