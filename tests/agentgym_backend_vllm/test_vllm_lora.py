"""LoRA through the vLLM backend's engine mode (the contract fake): adapters only, as vLLM LoRA requests.

A LoRA recipe builds the engine with ``enable_lora`` and a ``max_lora_rank`` covering the recipe's rank;
each sync of a LoRA policy's adapter tensors becomes a new adapter version that every later request
carries, and the previous version leaves the engine. On two gloo learner ranks (strict collectives),
every rank's engine gets the same adapters, and the step's ``weight_sync_bytes`` are the adapters' bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from agentgym_backend_vllm.weights import SETUP_METHOD

from agentgym_core.rollout.backend import SamplingParams

pytest.importorskip("peft")

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def make(model_dir, **options):
    from agentgym_backend_vllm import make_backend

    return make_backend({"model": str(model_dir), "lora": LORA, **options})


def lora_policy(seed: int):
    """The tiny model with LoRA adapters as the learner has them, moved off zero (a trained policy)."""
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.policy import wrap_lora
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    lora = ",".join(LORA["target_modules"])
    config = load_config(None, ["envs=[{name: word}]", "model.lora.enabled=true", f"model.lora.r={LORA['r']}",
                                f"model.lora.alpha={LORA['alpha']}", f"model.lora.target_modules=[{lora}]"])
    torch.manual_seed(seed)
    model = wrap_lora(model, config.model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.normal_(0, 0.3)
    return model.eval()


def adapters_of(model):
    """What a learner rank sends: the adapter tensors alone, gathered as the learner gathers them."""
    from agentgym_core.rl.learner import is_adapter_weight
    from agentgym_core.rl.weight_sync import gather_weights

    return {k: v.clone() for k, v in gather_weights(model, dtype=None, include=is_adapter_weight).items()}


def test_a_lora_recipe_builds_the_engine_with_lora_and_a_rank_that_covers_it(fake_vllm, tiny_model_dir):
    engine = make(tiny_model_dir).engine
    assert engine.args.enable_lora and engine.args.max_lora_rank == 8 and engine.args.max_loras == 1
    engine = make(tiny_model_dir, lora={**LORA, "r": 16}).engine
    assert engine.args.max_lora_rank == 16
    from agentgym_backend_vllm import make_backend

    assert not make_backend({"model": str(tiny_model_dir)}).engine.args.enable_lora  # no LoRA, no LoRA engine


def test_each_sync_is_a_new_adapter_version_that_requests_carry_and_the_old_one_goes(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir)
    engine = backend.engine
    ids = backend.encode(backend.apply_chat_template([{"role": "user", "content": "Guess."}],
                                                     add_generation_prompt=True))
    for version, seed in ((1, 1), (2, 2)):
        policy = lora_policy(seed)
        sent = adapters_of(policy)
        backend.load_weights(sent)
        backend.generate([ids], SamplingParams(temperature=1.0, max_new_tokens=3, seed=0))
        carried = engine.request_loras[-1]
        assert carried is not None and carried.lora_int_id == version == backend.lora_request.lora_int_id
        loaded = engine.loras[carried.lora_int_id]
        # bit-exact: the file vLLM reads holds the learner's tensors, under PEFT's saved names
        assert sorted(loaded.tensors) == sorted(k.replace(".default.", ".") for k in sent)
        assert all(torch.equal(loaded.tensors[k.replace(".default.", ".")], v) for k, v in sent.items())
        assert loaded.config["r"] == LORA["r"] and loaded.config["lora_alpha"] == LORA["alpha"]
        assert backend.weight_syncs[-1]["bytes"] == sum(v.numel() * v.element_size() for v in sent.values())
        # the engine samples as the learner's LoRA policy scores
        seq = ids + [5, 9, 2]
        with torch.no_grad():
            lp = torch.log_softmax(policy(input_ids=torch.tensor([seq])).logits[0, :-1].float(), -1)
        theirs = [0.0] + [float(lp[i, t]) for i, t in enumerate(seq[1:])]
        assert backend.score([seq])[0] == pytest.approx(theirs, abs=1e-5)
    assert ("remove_lora", 1) in engine.calls and engine.list_loras() == {2}  # the old version left the engine
    assert not Path(engine.loras[2].request.lora_path).with_name("v1").exists()  # and its directory
    # the base weights never moved
    assert not [c for c in engine.calls if c[0] == "collective_rpc" and c[1] != SETUP_METHOD]


def test_a_colocated_engine_wakes_for_the_adapter_and_sleeps_after_the_rollout(fake_vllm, tiny_model_dir):
    backend = make(tiny_model_dir, gpu_sharing="colocate")
    ids = backend.encode("hello")
    backend.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=2))
    assert backend.asleep
    backend.load_weights(adapters_of(lora_policy(1)))
    assert not backend.asleep and backend.engine.list_loras() == {1}
    calls = [c for c in backend.engine.calls if c[0] in ("wake_up", "add_lora")]
    assert calls[-3:] == [("wake_up", ("weights",)), ("add_lora", 1), ("wake_up", ("kv_cache",))]


def test_lora_is_refused_when_the_recipe_loads_where_vllm_cannot_take_it(tiny_model_dir):
    from agentgym_backend_vllm.config import VllmBackendConfig
    from pydantic import ValidationError

    server = {"model": "m", "mode": "server", "urls": ["http://127.0.0.1:9"], "lora": LORA}
    with pytest.raises(ValidationError, match="model.lora.enabled with mode 'server'"):
        VllmBackendConfig.model_validate(server)
    with pytest.raises(ValidationError, match="vLLM serves LoRA ranks up to 512"):
        VllmBackendConfig.model_validate({"model": "m", "lora": {**LORA, "r": 600}})
    with pytest.raises(ValidationError, match="sleep_level 2 with model.lora.enabled"):
        VllmBackendConfig.model_validate({"model": "m", "lora": LORA, "gpu_sharing": "colocate", "sleep_level": 2})


@pytest.mark.slow
def test_two_gloo_ranks_each_load_the_same_adapters_and_log_their_bytes(tmp_path, tiny_model_dir, monkeypatch):
    from lora_ranks import train_rank

    from agentgym_core.rl.distributed import spawn

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "agentgym_core" / "rl"))  # the word env, the runs
    monkeypatch.setenv("AGENTGYM_STRICT_COLLECTIVES", "cuda")
    spawn(train_rank, 2, str(tiny_model_dir), str(tmp_path))
    from safetensors.torch import load_file

    found = [load_file(str(tmp_path / f"rank{r}.safetensors")) for r in range(2)]
    syncs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert found[0] and sorted(found[0]) == sorted(found[1])
    assert all(torch.equal(found[0][k], found[1][k]) for k in found[0])  # every rank's engine: the same adapters
    for rank in syncs:
        assert rank["versions"] == [2] and rank["removed"] == [1]  # two syncs, the first version gone
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lines = [x for x in lines if x["kind"] == "train"]
    assert len(lines) == 2
    adapter_bytes = sum(t.numel() * t.element_size() for t in found[0].values())
    for line in lines:
        assert line["weight_sync_bytes"] == adapter_bytes  # the adapters only, in the step's metrics
        assert line["weight_sync_gap"] < 1e-5  # each engine then scores the probe as its learner does
        assert line["rollout_logprob_gap"] < 1e-3  # and sampled with the adapters the learner trains


def test_one_learner_trains_lora_through_the_engine_sending_adapters_only(tmp_path, tiny_model_dir, fake_vllm,
                                                                         monkeypatch):
    """One process: the learner's adapters (not merged weights) reach the engine after each step."""
    import fake_vllm as fake

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "agentgym_core" / "rl"))
    from learner_ranks import BASE
    from lora_ranks import LORA as LORA_OVERRIDES
    from word_env import WordPlugin

    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.trainer import train

    pytest.importorskip("agentgym_estimators")
    pm = PluginManager(autoload=True, allow=["estimators", "vllm"])
    pm.register(WordPlugin(), "word-test")
    fake.ENGINES.clear()
    config = load_config(None, [*BASE, *LORA_OVERRIDES, f"model.path={tiny_model_dir}", "model.device=cpu",
                                "rollout.backend=vllm", f"trainer.run_dir={tmp_path / 'run'}", "trainer.save_every=2"])
    train(config, plugin_manager=pm)
    (engine,) = fake.ENGINES
    assert engine.args.enable_lora and engine.list_loras() == {2}
    assert not [c for c in engine.calls if c[0] == "collective_rpc" and c[1] != SETUP_METHOD]  # no full-weight sync
    adapter_bytes = sum(t.numel() * t.element_size() for t in engine.loras[2].tensors.values())
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lines = [x for x in lines if x["kind"] == "train"]
    assert len(lines) == 2
    for line in lines:
        assert line["weight_sync_bytes"] == adapter_bytes and line["weight_sync_gap"] < 1e-5
