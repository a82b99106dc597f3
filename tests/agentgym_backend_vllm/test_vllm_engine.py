"""Engine mode against the contract fake of vLLM (fake_vllm.py): the protocol, caps, weights, sleep/wake."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from agentgym_backend_vllm.weights import SETUP_METHOD

from agentgym_core.rollout.backend import ContinuousBackend, SamplingParams
from agentgym_core.testing import check_backend


def make(model_dir, **options):
    from agentgym_backend_vllm import make_backend

    return make_backend({"model": str(model_dir), **options})


def prompt(backend, text="Guess a number."):
    return backend.encode(backend.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True))


def test_check_backend_passes_through_the_fake(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir)
    assert isinstance(backend, ContinuousBackend)
    check_backend(backend)


def test_replies_match_a_plain_forward_pass(fake_vllm, tiny_model_dir):
    """Greedy ids and log-probs are what the transformers model itself gives (tokens in, tokens out)."""
    from transformers import AutoModelForCausalLM

    backend = make(tiny_model_dir)
    ids = prompt(backend)
    sample = backend.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=5))[0]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    seq = list(ids)
    with torch.no_grad():
        for token, logprob in zip(sample.token_ids, sample.logprobs, strict=True):
            logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
            assert token == int(logits.argmax())
            assert logprob == pytest.approx(float(torch.log_softmax(logits, -1)[token]), abs=1e-5)
            seq.append(token)


def test_token_cap_is_the_smallest_of_turn_budget_and_context(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir, max_model_len=40)
    ids = prompt(backend)
    room = 40 - len(ids)
    assert 0 < room < 30
    greedy = SamplingParams(temperature=0.0, max_new_tokens=30)
    assert backend.request_cap(len(ids), 50, 30) == room  # the context is the tightest
    assert backend.request_cap(len(ids), 2, 30) == 2  # the trajectory budget is
    assert backend.request_cap(len(ids), 50, 3) == 3  # the turn cap is
    sample = backend.generate([ids], greedy.model_copy(update={"max_new_tokens": 3}), max_new_tokens=[50])[0]
    assert len(sample.token_ids) <= 3
    with pytest.raises(ValueError, match="max_model_len"):
        backend.request_cap(40, 5, 5)


def test_running_batch_returns_replies_as_they_finish(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir)
    batch = backend.open_batch(SamplingParams(temperature=0.0, max_new_tokens=6))
    batch.add("short", prompt(backend), max_new_tokens=1)
    batch.add("long", prompt(backend, "Say more."), max_new_tokens=6)
    first = batch.step()
    assert [key for key, _ in first] == ["short"] and first[0][1].finish_reason in ("length", "eos")
    batch.add("joined", prompt(backend, "Hi"), max_new_tokens=2)  # joins between steps
    seen = {"short"}
    while batch.active:
        seen |= {key for key, _ in batch.step()}
    assert seen == {"short", "long", "joined"}
    batch.close()
    assert not backend.engine.has_unfinished_requests()


def test_close_aborts_what_is_still_decoding(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir)
    batch = backend.open_batch(SamplingParams(temperature=1.0, max_new_tokens=50, seed=3))
    batch.add(0, prompt(backend), max_new_tokens=50)
    batch.step()
    batch.close()
    assert not backend.engine.has_unfinished_requests()


def test_stop_string_ends_a_reply(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir)
    ids = prompt(backend)
    free = backend.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=12))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 12  # the random model rambles on
    stop = backend.decode(free.token_ids[5:6])  # the text of the sixth sampled token
    assert stop
    cut = backend.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=12, stop=[stop]))[0]
    assert cut.finish_reason == "stop_string"
    assert stop in backend.decode(cut.token_ids) and len(cut.token_ids) <= 6
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)]  # the stop string's tokens stay in the reply


def _perturbed(backend_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(backend_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model.state_dict()


def test_load_weights_goes_to_the_workers_in_buckets_then_resets_the_prefix_cache(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir, weight_bucket_mb=0.01)
    ids = prompt(backend)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    before = backend.generate([ids], greedy)[0]
    new = _perturbed(tiny_model_dir)
    backend.load_weights(new)
    calls = backend.engine.calls
    rpcs = [c[1] for c in calls if c[0] == "collective_rpc" and c[1] != SETUP_METHOD]
    # one update: open, several buckets, close (vLLM re-processes the layers between open and close)
    assert rpcs[0] == "agentgym_begin_weight_update" and rpcs[-1] == "agentgym_finish_weight_update"
    assert len(rpcs) > 3 and set(rpcs[1:-1]) == {"agentgym_load_weights"}
    assert calls[-1] == ("reset_prefix_cache",) and calls[-2] == ("collective_rpc", "agentgym_finish_weight_update")
    assert backend.weight_syncs[-1]["buckets"] == len(rpcs) - 2
    engine_params = backend.engine.model.state_dict()
    assert all(torch.equal(engine_params[k], v) for k, v in new.items())
    after = backend.generate([ids], greedy)[0]
    # What the fresh weights give from scratch (a new engine on them): the reset left nothing stale.
    assert after.logprobs != before.logprobs
    scored = backend.score([ids + after.token_ids])[0][len(ids):]
    assert scored == pytest.approx(after.logprobs, abs=1e-5)


def test_without_the_reset_the_prefix_cache_would_serve_old_weights(fake_vllm, tiny_model_dir):
    """The fake's prefix cache is real enough that skipping reset_prefix_cache shows (guards the test above)."""
    backend = make(tiny_model_dir)
    ids = prompt(backend)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=1)
    backend.generate([ids], greedy)
    backend.engine.collective_rpc("agentgym_begin_weight_update")
    backend.engine.collective_rpc("agentgym_load_weights", args=(list(_perturbed(tiny_model_dir).items()),))
    backend.engine.collective_rpc("agentgym_finish_weight_update")
    stale = backend.generate([ids], greedy)[0]
    backend.engine.reset_prefix_cache()
    fresh = backend.generate([ids], greedy)[0]
    assert stale.logprobs != fresh.logprobs


def test_a_bucket_outside_an_update_fails_as_on_vllm(fake_vllm, tiny_model_dir):
    """Loaded weights are in vLLM's kernel format: a bare model.load_weights fails (as on vLLM 0.32's CPU backend)."""
    backend = make(tiny_model_dir)
    bucket = list(_perturbed(tiny_model_dir).items())[:1]
    with pytest.raises(RuntimeError, match="agentgym_begin_weight_update first"):
        backend.engine.collective_rpc("agentgym_load_weights", args=(bucket,))
    worker = backend.engine.workers[0]
    with pytest.raises(AttributeError, match="weight_loader"):
        worker.model_runner.get_model().load_weights(bucket)


def test_a_failed_bucket_still_closes_the_update(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir, weight_bucket_mb=0.01)
    new = dict(_perturbed(tiny_model_dir))
    new["no.such.weight"] = torch.zeros(2)
    with pytest.raises(KeyError, match="no.such.weight"):
        backend.load_weights(new)
    assert backend.engine.calls[-1] == ("collective_rpc", "agentgym_finish_weight_update")
    backend.load_weights(_perturbed(tiny_model_dir))  # the worker took the next update: nothing left open


def test_load_weights_refuses_while_requests_hold_the_cache(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir)
    batch = backend.open_batch(SamplingParams(temperature=0.0, max_new_tokens=50))
    batch.add("a", prompt(backend), max_new_tokens=50)
    with pytest.raises(RuntimeError, match="still running"):
        backend.load_weights(_perturbed(tiny_model_dir))
    # refused before touching weights
    assert not [c for c in backend.engine.calls if c[0] == "collective_rpc" and c[1] != SETUP_METHOD]
    batch.close()


def test_colocated_engine_sleeps_after_a_rollout_and_wakes_weights_then_kv_cache(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir, gpu_sharing="colocate", sleep_level=2)
    ids = prompt(backend)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=3)
    backend.engine.calls.clear()  # the workers were asked what they sample on when the engine was built
    backend.generate([ids], greedy)
    assert backend.engine.calls == [("sleep", 2)] and backend.engine.is_sleeping()
    new = _perturbed(tiny_model_dir)
    backend.engine.calls.clear()
    backend.load_weights(new)  # level 2 dropped the weights: every one must come back through here
    names = [c[0] if c[0] != "wake_up" else c for c in backend.engine.calls]
    assert names[0] == ("wake_up", ("weights",))
    assert names[-2:] == [("wake_up", ("kv_cache",)), "reset_prefix_cache"]
    assert set(names[1:-2]) == {"collective_rpc"}  # begin, the buckets, finish: all between the two wake-ups
    assert not backend.engine.is_sleeping()
    assert all(torch.equal(backend.engine.model.state_dict()[k], v) for k, v in new.items())
    backend.generate([ids], greedy)  # awake: sampling works, and the rollout's end puts it back to sleep
    assert backend.engine.calls[-1] == ("sleep", 2)


def test_level_2_sleep_refuses_to_sample_from_discarded_weights(fake_vllm, tiny_model_dir):
    """A second batch between two weight loads (a failed episode re-run, an evaluation) would wake an
    engine whose weights level 2 dropped: it is refused in one line instead of sampling garbage."""
    backend = make(tiny_model_dir, gpu_sharing="colocate", sleep_level=2)
    ids = prompt(backend)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=3)
    backend.generate([ids], greedy)  # the rollout: the engine sleeps at its end, dropping the weights
    with pytest.raises(RuntimeError, match="discarded when the engine slept .*sleep_level: 1"):
        backend.generate([ids], greedy)
    backend.load_weights(_perturbed(tiny_model_dir))
    backend.generate([ids], greedy)  # weights came back: sampling works again
    level_1 = make(tiny_model_dir, gpu_sharing="colocate", sleep_level=1)
    level_1.generate([ids], greedy)
    level_1.generate([ids], greedy)  # level 1 keeps the weights in host memory: a second batch is fine


def test_separate_gpu_mode_never_sleeps(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir, gpu_sharing="separate")
    backend.generate([prompt(backend)], SamplingParams(temperature=0.0, max_new_tokens=2))
    backend.load_weights(_perturbed(tiny_model_dir))
    assert [c for c in backend.engine.calls if c[0] in ("sleep", "wake_up")] == []


def test_without_vllm_engine_mode_fails_with_one_line_saying_what_to_install(tiny_model_dir):
    code = (
        "import sys; sys.modules['vllm'] = None\n"  # as if not installed, whatever this machine has
        "from agentgym_backend_vllm import make_backend\n"
        f"make_backend({{'model': {str(tiny_model_dir)!r}}})\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("agentgym_backend_vllm.engine.VllmNotInstalledError: ")
    assert "pip install -e './plugins/agentgym_backend_vllm[engine]'" in last


def test_eval_with_vllm_backend_but_no_vllm_says_the_working_install_line_in_one_line(tiny_model_dir, tmp_path):
    pytest.importorskip("agentgym_env_guess")
    code = (
        "import sys; sys.modules['vllm'] = None\n"  # as if not installed, whatever this machine has
        "from agentgym_core.cli import main\n"
        f"sys.exit(main(['eval', '--env', 'guess', '--backend', 'vllm', '--model', {str(tiny_model_dir)!r}, "
        f"'--limit', '1', '--out', {str(tmp_path / 'run')!r}]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentgym: error: "), result.stderr
    assert "pip install -e './plugins/agentgym_backend_vllm[engine]'" in lines[0]
    assert not (tmp_path / "run").exists()


def test_lora_adapter_weights_are_refused_in_one_line_by_an_engine_built_without_lora(fake_vllm, tiny_model_dir):
    from agentgym_core.plugins import PluginError

    backend = make(tiny_model_dir)
    adapter = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight": torch.zeros(4, 8)}
    with pytest.raises(PluginError, match="LoRA adapter weights .*built without LoRA: the trainer sets "
                                          "backend_options.lora from model.lora"):
        backend.load_weights(adapter)
    assert not [c for c in backend.engine.calls if c[0] == "collective_rpc" and c[1] != SETUP_METHOD]


def test_the_engine_says_what_its_workers_sample_on(fake_vllm, tiny_model_dir):
    # Issue 46: rollout/* names the device, dtype and kernel of every backend, vLLM's from its workers.
    backend = make(tiny_model_dir, dtype="bfloat16", gpu_sharing="colocate")
    assert backend.sampling_setup == {"device": "cpu", "dtype": "bfloat16", "attention_kernel": "TORCH_SDPA",
                                      "decode_engine": f"vllm {fake_vllm.__version__}"}
    backend.sleep()  # asked when the engine was built: a sleeping engine still answers
    assert backend.sampling_setup["attention_kernel"] == "TORCH_SDPA"
