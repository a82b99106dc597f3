"""Two GRPO steps with rollout.backend=vllm: through the fake engine, and through a stand-in replica.

The trainer loads its own policy from the tiny model's directory and the vLLM backend its own copy,
so new weights reach the rollouts only through ``load_weights`` after each update.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentgym_core.rl.trainer import train
from agentgym_core.testing import serve_app

pytest.importorskip("agentgym_estimators")


@pytest.fixture
def pm(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "agentgym_core" / "rl"))  # WordEnv of the rl tests
    from word_env import WordPlugin

    from agentgym_core.plugins import PluginManager

    manager = PluginManager(autoload=True, allow=["estimators", "vllm"])
    manager.register(WordPlugin(), "word-test")
    return manager


def config(run_dir, model_dir, options):
    from agentgym_core.rl.config import load_config

    return load_config(None, [
        "envs=[{name: word, max_concurrency: 1}]", f"model.path={model_dir}", "model.device=cpu",
        f"trainer.run_dir={run_dir}", "trainer.steps=2", "trainer.save_every=2", "trainer.eval_tasks=0",
        "trainer.progress=false", "trainer.tensorboard=false", "rollout.backend=vllm",
        f"rollout.backend_options={json.dumps(options)}",
        "rollout.tasks_per_step=2", "rollout.group_size=3", "rollout.max_new_tokens=6",
        "rollout.max_total_tokens=256", "algorithm.rounds_ctrl.rounds=2", "optim.lr=0.05",
    ])


def trained(run_dir, setup):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    lines = [x for x in lines if x["kind"] == "train"]
    assert [x["step"] for x in lines] == [1, 2]
    # what sampled the run, on its first line (issue 46), as the engine's workers or the replica said it
    assert {k.removeprefix("rollout/"): v for k, v in lines[0].items() if k.startswith("rollout/")} == setup
    for x in lines:
        assert x["trajectories"] == 6 and x["sampled_tokens"] > 0
        # The trainer recomputes the rollout's log-probs with its own weights: they match only if the
        # backend sampled with those weights, i.e. step 1's update reached it through load_weights.
        assert x["rollout_logprob_gap"] < 1e-3
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "step_000002" / "model").state_dict()


def test_two_training_steps_through_the_fake_engine(tmp_path, pm, fake_vllm, tiny_model_dir):
    import fake_vllm as fake

    fake.ENGINES.clear()
    train(config(tmp_path / "run", tiny_model_dir, {"gpu_sharing": "colocate", "weight_bucket_mb": 0.05}),
          plugin_manager=pm)
    final = trained(tmp_path / "run", {"device": "cpu", "dtype": "float32", "attention_kernel": "TORCH_SDPA",
                                       "decode_engine": f"vllm {fake.__version__}"})
    (engine,) = fake.ENGINES
    syncs = [i for i, c in enumerate(engine.calls) if c == ("wake_up", ("weights",))]
    if engine.is_sleeping():  # the sync check's probe ran a batch after the last load, and the engine slept after it
        engine.wake_up()
    assert all(torch.equal(engine.model.state_dict()[k], v) for k, v in final.items()), "engine has stale weights"
    assert len(syncs) == 2  # one weight sync per step, each after the engine slept through the update
    for i in syncs:
        assert engine.calls[i - 1][0] == "sleep" and engine.calls[i + 1][0] == "collective_rpc"


def test_two_training_steps_through_a_stand_in_replica(tmp_path, pm, tiny_model_dir, stand_in):
    app, local = stand_in()
    with serve_app(app) as url:
        train(config(tmp_path / "run", tiny_model_dir, {"mode": "server", "urls": [url]}), plugin_manager=pm)
    final = trained(tmp_path / "run", {**local.sampling_setup, "server": url})
    assert all(torch.equal(local.model.state_dict()[k], v) for k, v in final.items()), "replica has stale weights"
    assert app.state.control_calls.count(("reset_prefix_cache",)) == 2
