"""The cache of converted GGUF models (agentgym_core.models): its keys, its atomic writes, its refusals.

The conversion of the real default model, and that a load from the cache equals the GGUF load, is
tests/agentgym_backend_transformers/test_backend.py::test_smollm2_default_model_samples_and_scores. Here a
tiny random model stands in for what the GGUF loader returns: the cache never reads the GGUF file's
contents but to hash them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from agentgym_core import models
from agentgym_core.models import cache_root, cached_gguf_folder, save_gguf_conversion
from agentgym_core.testing.tiny_model import tiny_chat_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF stand-in bytes")
    return path


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", "")
    assert cache_root() is None  # off
    monkeypatch.delenv("AGENTGYM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "agentgym"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "agentgym"


def test_a_saved_conversion_is_found_and_loads_as_the_same_model(cache, gguf, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = tiny_chat_model(seed=0)
    assert cached_gguf_folder(gguf) is None
    folder = save_gguf_conversion(gguf, model, tokenizer)
    assert folder is not None and folder.parent == cache / "gguf" and folder.name.startswith("model-")
    assert "later loads read it in seconds" in capsys.readouterr().err
    assert cached_gguf_folder(gguf) == folder
    assert save_gguf_conversion(gguf, model, tokenizer) == folder  # already there: kept, not rewritten
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no partial folder left behind

    again = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = torch.tensor([tokenizer("the cache keeps the weights").input_ids])
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)
    assert AutoTokenizer.from_pretrained(folder)("one two").input_ids == tokenizer("one two").input_ids


def test_another_file_or_changed_contents_is_another_entry(cache, gguf, tmp_path):
    model, tokenizer = tiny_chat_model(seed=0)
    folder = save_gguf_conversion(gguf, model, tokenizer)
    other = tmp_path / "model2.gguf"
    other.write_bytes(b"other bytes")
    assert cached_gguf_folder(other) is None
    gguf.write_bytes(b"GGUF stand-in bytes, edited")
    os.utime(gguf, ns=(1, 1))  # a new mtime: the remembered hash does not stand
    assert cached_gguf_folder(gguf) is None and folder.is_dir()


def test_a_folder_without_its_completion_mark_is_not_used(cache, gguf):
    model, tokenizer = tiny_chat_model(seed=0)
    folder = save_gguf_conversion(gguf, model, tokenizer)
    (folder / "COMPLETE").unlink()  # as if the process died while writing
    assert cached_gguf_folder(gguf) is None


def test_a_second_process_that_finishes_later_keeps_the_first_ones_folder(cache, gguf, monkeypatch):
    model, tokenizer = tiny_chat_model(seed=0)
    entry = models._entry(gguf)
    real_rename = Path.rename

    def another_process_finishes_first(self, target):  # between this process's check and its rename
        target.mkdir(parents=True)
        (target / "COMPLETE").write_text("the other process\n")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", another_process_finishes_first)
    assert save_gguf_conversion(gguf, model, tokenizer) == entry
    assert (entry / "COMPLETE").read_text() == "the other process\n"
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # this process's partial folder removed


def test_an_unwritable_cache_is_said_once_and_the_load_goes_on(tmp_path, gguf, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(blocked))
    model, tokenizer = tiny_chat_model(seed=0)
    said: list[str] = []
    assert save_gguf_conversion(gguf, model, tokenizer, say=said.append) is None
    assert len(said) == 1 and "could not save model.gguf" in said[0] and "AGENTGYM_CACHE_DIR" in said[0]


def test_the_cache_off_saves_nothing(gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", "")
    model, tokenizer = tiny_chat_model(seed=0)
    assert save_gguf_conversion(gguf, model, tokenizer) is None and cached_gguf_folder(gguf) is None
