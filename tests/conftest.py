"""Suite-wide fixtures. Entry-point autoload is off: a test that wants installed plugins asks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random chat model saved as a Hugging Face directory (what `--model DIR` loads)."""
    from agentgym_core.testing.tiny_model import tiny_chat_model

    path = tmp_path_factory.mktemp("tiny_model")
    model, tokenizer = tiny_chat_model()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
