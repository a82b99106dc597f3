"""A GGUF model converted once to a Hugging Face folder, so later loads skip transformers' GGUF parser.

transformers reads a GGUF file three times per load (config, tokenizer, weights) through a pure-Python
parser: the default SmolLM2-135M file takes 32 s to load on a 2-core CPU, ~3 s of it dequantizing,
against 4.1 s for the same model saved as safetensors (``bench/model_load.py``). The first load of a GGUF
file saves what it loaded (float32 weights, tokenizer, config: exactly what the GGUF loader produced)
under the cache folder; every later load of the same file reads that folder instead.

The cache folder is ``$AGENTGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/agentgym``, else ``~/.cache/agentgym``;
``AGENTGYM_CACHE_DIR=""`` turns the cache off. An entry is keyed by the file's content and the
transformers version that converted it, written under a temporary name and renamed when complete, so a
crash or a second process converting at the same time never leaves a half-written entry. Delete
``<cache>/gguf`` to reclaim the space (about 4 bytes per parameter).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["cache_root", "cached_gguf_folder", "save_gguf_conversion"]

_COMPLETE = "COMPLETE"  # written last: a folder without it is ignored
_hashes: dict[tuple[str, int, int], str] = {}


def cache_root() -> Path | None:
    """Where agentgym keeps what it can rebuild (None: ``AGENTGYM_CACHE_DIR`` set to the empty string)."""
    chosen = os.environ.get("AGENTGYM_CACHE_DIR")
    if chosen is not None:
        return Path(chosen).expanduser() if chosen.strip() else None
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "agentgym"


def _content_hash(path: Path) -> str:
    """sha256 of the file (~0.2 s for 100 MB), remembered per path, size and mtime within a process."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _hashes:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        _hashes[key] = digest.hexdigest()
    return _hashes[key]


def _entry(gguf: Path) -> Path | None:
    root = cache_root()
    if root is None:
        return None
    import transformers

    key = hashlib.sha256(f"{_content_hash(gguf)} transformers {transformers.__version__}".encode()).hexdigest()
    return root / "gguf" / f"{gguf.stem}-{key[:16]}"


def cached_gguf_folder(gguf: Path) -> Path | None:
    """The complete Hugging Face folder converted from ``gguf``, if an earlier load saved one."""
    entry = _entry(gguf)
    return entry if entry is not None and (entry / _COMPLETE).is_file() else None


def save_gguf_conversion(gguf: Path, model: Any, tokenizer: Any, *, say: Callable[[str], None] | None = None) -> Path | None:
    """Save ``model`` and ``tokenizer``, as just loaded from ``gguf`` (float32, the GGUF quantizer detached), as the
    cache entry of ``gguf``; the folder, or None when the cache is off or cannot be written (said once, not raised:
    the run goes on with the model it has)."""
    entry = _entry(gguf)
    if entry is None:
        return None
    if (entry / _COMPLETE).is_file():
        return entry
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    partial = entry.with_name(f".{entry.name}.{os.getpid()}.partial")
    try:
        partial.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(partial, safe_serialization=True)
        tokenizer.save_pretrained(partial)
        (partial / _COMPLETE).write_text(f"converted from {gguf.resolve()}\n")
        try:
            partial.rename(entry)
        except OSError:  # another process finished the same conversion first: keep its folder
            if not (entry / _COMPLETE).is_file():
                raise
            shutil.rmtree(partial, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        say(f"note: could not save {gguf.name} converted under {entry.parent} ({exc.strerror or exc}); later runs "
            "will parse the GGUF file again (set AGENTGYM_CACHE_DIR to a writable folder, or to '' to stop trying)")
        return None
    say(f"saved {gguf.name} as a Hugging Face folder in {entry}: later loads read it in seconds")
    return entry
