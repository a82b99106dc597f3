"""Whether the installed transformers and torch keep packed sequences apart, read without importing either.

The recipe schema refuses ``algorithm.packing: true`` where they do not; it asks here, from the
installed distributions' metadata, so loading a recipe imports neither torch nor the forward pass.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["PACKING_MIN_TORCH", "PACKING_MIN_TRANSFORMERS", "installed_version", "packing_support_problem"]

PACKING_MIN_TRANSFORMERS = "4.53.1"
"""First transformers release whose mask builder (``masking_utils.find_packed_sequence_indices``, PR
#39194, shipped in the 4.53.1 patch release; absent from 4.53.0) turns restarting ``position_ids``
into a block-diagonal mask for eager and SDPA attention when no attention mask is given."""
PACKING_MIN_TORCH = "2.6"
"""transformers applies that packed mask only with torch >= 2.6 (``and_masks`` needs it) and
otherwise falls back, silently, to a plain causal mask."""


def installed_version(package: str) -> str | None:
    """The installed distribution's version string, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of a version string like '4.53.1', '2.6.0+cpu' or '5.0.0rc1'."""
    parts: list[int] = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits or 0))
    return tuple(parts + [0] * (3 - len(parts)))


def packing_support_problem(transformers_version: str | None, torch_version: str | None) -> str | None:
    """Why packed rows would attend across sequences with these versions, or None when packing is safe."""
    if transformers_version is None:
        return "transformers is not installed"
    if _release(transformers_version) < _release(PACKING_MIN_TRANSFORMERS):
        return (f"transformers {transformers_version} does not detect packed sequences from position_ids (it needs "
                f">= {PACKING_MIN_TRANSFORMERS}), so packed rows would attend across sequences")
    if torch_version is None or _release(torch_version) < _release(PACKING_MIN_TORCH):
        return (f"transformers applies the packed-sequence mask only with torch >= {PACKING_MIN_TORCH} (installed: "
                f"{torch_version}), so packed rows would attend across sequences")
    return None

