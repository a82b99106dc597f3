"""The transformers backend: contract, sampling controls, weight sync, plugin registration."""

from __future__ import annotations

import pytest
import torch

from agentgym_core.rollout import ChatFormat, SamplingParams
from agentgym_core.testing.backend import BackendCheckError, check_backend


def test_passes_check_backend(tiny_backend):
    check_backend(tiny_backend)


def test_the_checker_names_a_close_that_cannot_run_twice(tiny_backend):
    from agentgym_backend_transformers import TransformersBackend

    class ClosesOnce(TransformersBackend):  # a stand-in with a broken close(): ours all close twice safely
        closed = False

        def close(self) -> None:
            if self.closed:
                raise RuntimeError("already closed")
            self.closed = True

    backend = ClosesOnce(tiny_backend.model, tiny_backend.tokenizer)
    with pytest.raises(BackendCheckError, match=r"second close\(\) raised RuntimeError: already closed"):
        check_backend(backend, close=True)
    check_backend(tiny_backend, close=True)  # the own engine: close() has nothing to stop, twice


def _prompt(backend):
    return ChatFormat(backend).prompt_ids([{"role": "user", "content": "Guess a number between 1 and 20."}])


def test_top_k_1_is_greedy(tiny_backend):
    prompt = _prompt(tiny_backend)
    greedy = tiny_backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=10))[0]
    top1 = tiny_backend.generate([prompt], SamplingParams(temperature=1.0, top_k=1, max_new_tokens=10, seed=5))[0]
    assert top1.token_ids == greedy.token_ids
    assert greedy.finish_reason == "length" and len(greedy.token_ids) == 10


def test_stop_string_ends_the_reply(tiny_backend):
    prompt = _prompt(tiny_backend)
    full = tiny_backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12))[0]
    head = tiny_backend.decode(full.token_ids[:6])
    stop = head[-2:] if head[-2:].strip() else head[-3:]
    cut = tiny_backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=12, stop=[stop]))[0]
    assert cut.finish_reason == "stop_string"
    assert stop in tiny_backend.decode(cut.token_ids) and len(cut.token_ids) <= 6
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]


def test_load_weights_changes_and_restores_the_policy(tiny_backend):
    prompt = _prompt(tiny_backend)
    before = tiny_backend.score([prompt])[0]
    original = {k: v.clone() for k, v in tiny_backend.model.state_dict().items()}
    try:
        noisy = {k: v + 0.05 * torch.randn_like(v) for k, v in original.items()}
        tiny_backend.load_weights(noisy)
        assert max(abs(a - b) for a, b in zip(tiny_backend.score([prompt])[0], before, strict=True)) > 1e-3
    finally:
        tiny_backend.load_weights(original)
    assert tiny_backend.score([prompt])[0] == pytest.approx(before, abs=1e-6)
    with pytest.raises(KeyError, match="does not have"):
        tiny_backend.load_weights({"not.a.weight": torch.zeros(1)})


def test_registered_through_the_entry_point():
    from agentgym_backend_transformers import make_backend
    from agentgym_core.plugins import PluginManager

    manager = PluginManager(autoload=True, allow=["transformers"])
    assert manager.get("rollout_backend", "transformers") is make_backend


def test_config_rejects_unknown_keys():
    from agentgym_backend_transformers import TransformersBackendConfig

    with pytest.raises(ValueError, match="extra"):
        TransformersBackendConfig(modle="x")


@pytest.mark.slow
def test_smollm2_default_model_samples_and_scores(tmp_path, monkeypatch):
    """The default model: its GGUF file's first load saves a Hugging Face copy in the cache (agentgym_core.models),
    the backend then loads that copy, and the copy is the same tokenizer and the same weights."""
    import shutil

    from agentgym_backend_transformers import make_backend
    from agentgym_core.models import load_pretrained, load_tokenizer, resolve_model

    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    resolved = resolve_model("smollm2-135m-instruct")
    try:
        from_gguf, gguf_tokenizer = load_pretrained(resolved)  # parses the GGUF file, saves the conversion
        [folder] = (tmp_path / "gguf").iterdir()
        assert (folder / "COMPLETE").is_file() and (folder / "model.safetensors").is_file()
        backend = make_backend({"model": "smollm2-135m-instruct", "device": "cpu", "threads": 2})
        assert load_tokenizer(resolved).name_or_path == str(folder)  # read from the copy, not the GGUF file

        texts = ["go to the red ball", "  Ünïcode, digits 12345 and\nnew lines\t", "<|im_start|>user"]
        assert backend.tokenizer(texts).input_ids == gguf_tokenizer(texts).input_ids
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Pick up the key."}]
        assert backend.tokenizer.apply_chat_template(chat, add_generation_prompt=True) == \
            gguf_tokenizer.apply_chat_template(chat, add_generation_prompt=True)
        for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
            assert getattr(backend.tokenizer, name) == getattr(gguf_tokenizer, name), name
        copied = backend.model.state_dict()
        assert copied.keys() == from_gguf.state_dict().keys()
        assert all(torch.equal(copied[k], v) for k, v in from_gguf.state_dict().items())
        # A learner rank that receives its shards builds the structure from the copy's config too.
        from agentgym_core.rl.config import ModelConfig
        from agentgym_core.rl.policy import load_policy

        structure, _ = load_policy(ModelConfig(path="smollm2-135m-instruct"), device="meta")
        assert {k: v.shape for k, v in structure.state_dict().items()} == {k: v.shape for k, v in copied.items()}
        del from_gguf
    finally:
        shutil.rmtree(tmp_path / "gguf", ignore_errors=True)  # ~540 MB of float32 weights

    check_backend(backend, max_new_tokens=4, atol=2e-3)
    prompt = _prompt(backend)
    sample = backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=40))[0]
    assert backend.decode(sample.token_ids).strip()
