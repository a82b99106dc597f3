"""The factory the plugin registers, importable without torch (its declarations are in ``config``).

The factory checks the model path before it imports torch and transformers (seconds of start-up),
so ``agentgym eval --model wrong/path`` answers at once; then it hands over to
:func:`agentgym_backend_transformers.backend.make_backend`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentgym_backend_transformers.config import CAPABILITIES, TransformersBackendConfig
from agentgym_core.models import resolve_model

if TYPE_CHECKING:
    from agentgym_backend_transformers.backend import TransformersBackend

__all__ = ["CAPABILITIES", "make_backend"]

def make_backend(
    config: TransformersBackendConfig | Mapping[str, Any] | None = None, *, model: Any = None, tokenizer: Any = None
) -> TransformersBackend:
    """The registered factory: a config (or dict of its fields) -> a loaded backend (see ``backend.make_backend``).

    Without a live ``model``, a model that cannot be found (:class:`agentgym_core.models.ModelNotFoundError`)
    is reported before torch is imported.
    """
    if not isinstance(config, TransformersBackendConfig):
        config = TransformersBackendConfig.model_validate(dict(config or {}))
    if model is None:
        resolve_model(config.model)
    from agentgym_backend_transformers.backend import make_backend as load

    return load(config, model=model, tokenizer=tokenizer)
