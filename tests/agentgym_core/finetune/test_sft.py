"""SFT on the tiny model: it learns the expert's replies, checkpoints in the RL layout, resumes exactly."""

from __future__ import annotations

import json

import pytest
import torch

from agentgym_core.finetune.config import FinetuneConfig
from agentgym_core.finetune.data import load_examples
from agentgym_core.finetune.sft import run_sft, sft_loss
from agentgym_core.rl.forward import forward_tokens
from agentgym_core.viewer.metric_docs import undocumented, undocumented_message


def _config(tmp_path, data, **sections):
    base = {"kind": "sft", "data": {"paths": [str(data)]}, "optim": {"lr": 3e-3},
            "sft": {"epochs": 3, "batch_size": 2, "micro_batch_tokens": 512},
            "trainer": {"run_dir": str(tmp_path / "run"), "eval_tasks": 0, "progress": False, "save_every": 2}}
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return FinetuneConfig.model_validate(base)


def _nll(model, examples):
    from agentgym_core.finetune.common import padded_mask

    mask = padded_mask(examples).to(next(model.parameters()).device)
    with torch.no_grad():
        lp = forward_tokens(model, [e.token_ids for e in examples], mask).logprobs
    return float(sft_loss(lp, mask))


def test_sft_loss_only_counts_masked_tokens():
    logprobs = torch.tensor([[-5.0, -1.0, -2.0], [-7.0, -3.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    assert float(sft_loss(logprobs, mask)) == pytest.approx((1 + 2 + 3) / 3)
    assert float(sft_loss(logprobs, mask, agg="seq_mean")) == pytest.approx((1.5 + 3) / 2)


def test_environment_tokens_get_no_gradient(tiny, guess_expert_log):
    """Changing only context (environment) tokens' targets leaves the loss unchanged."""
    model, _ = tiny
    example = load_examples(guess_expert_log)[0]
    mask = torch.tensor([example.loss_mask], dtype=torch.float32)
    lp = forward_tokens(model, [example.token_ids], mask).logprobs
    assert bool((lp[mask == 0] == 0).all()) and bool((lp[mask == 1] < 0).all())


def test_sft_learns_the_expert_and_saves_an_rl_checkpoint(tmp_path, tiny, guess_expert_log):
    model, tokenizer = tiny
    examples = load_examples(guess_expert_log)
    before = _nll(model, examples)
    result = run_sft(_config(tmp_path, guess_expert_log), model=model, tokenizer=tokenizer)
    after = _nll(model, examples)
    assert after < before - 0.5, (before, after)
    assert result.steps == 9 and result.checkpoint is not None and result.checkpoint.name == "step_000009"
    # Saved at steps 2, 4, 6, 8 and 9; trainer.keep_checkpoints (default 2) keeps the newest two.
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*")) == ["step_000008", "step_000009"]
    assert (result.checkpoint / "DONE").exists() and (result.model_path / "config.json").exists()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(1, 10))
    keys = {k for x in lines for k in x}
    assert not undocumented(keys), undocumented_message(keys, "SFT")  # the docs' "What a run logs"
    # The checkpoint loads as a plain HF model (an RL run's model.path) with the trained weights.
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(result.model_path)
    assert _nll(reloaded, examples) == pytest.approx(after, abs=1e-4)


def test_sft_evaluates_after_training_without_the_optimizer_state(tmp_path, tiny, pm, guess_expert_log, monkeypatch):
    """AdamW's moments (2x the weights in float32) are dropped once the last step is saved: the held-out
    evaluation after SFT (and an RL run after a warm start) does not carry them; the checkpoint keeps them."""
    from agentgym_core.rl import envs
    from agentgym_core.training import optimizer as optimizer_module

    optimizers, state_at_eval = [], []
    build, evaluate = optimizer_module.build_optimizer, envs.evaluate

    def recording_build(*args, **kwargs):
        optimizer, schedule = build(*args, **kwargs)
        optimizers.append(optimizer)
        return optimizer, schedule

    def recording_evaluate(backend, envs, config, horizon, step):
        state_at_eval.append((step, sum(t.numel() for s in optimizers[0].state.values() for t in s.values()
                                        if isinstance(t, torch.Tensor))))
        return evaluate(backend, envs, config, horizon, step)

    monkeypatch.setattr(optimizer_module, "build_optimizer", recording_build)
    monkeypatch.setattr(envs, "evaluate", recording_evaluate)
    model, tokenizer = tiny
    config = FinetuneConfig.model_validate({**_config(tmp_path, guess_expert_log, sft={"epochs": 1}).model_dump(),
                                            "envs": [{"name": "guess"}], "trainer": {
                                                "run_dir": str(tmp_path / "run"), "eval_tasks": 1, "progress": False}})
    result = run_sft(config, model=model, tokenizer=tokenizer, plugin_manager=pm)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert state_at_eval[-1] == (result.steps, 0)
    from agentgym_core.training.checkpoint import load_trainer_state

    saved = load_trainer_state(result.checkpoint)["optimizer"]["state"]
    assert sum(s["exp_avg"].numel() + s["exp_avg_sq"].numel() for s in saved.values()) == 2 * trainable


def test_sft_resume_matches_uninterrupted(tmp_path, guess_expert_log):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    full = run_sft(_config(tmp_path / "a", guess_expert_log), model=model, tokenizer=tokenizer)
    cut_cfg = _config(tmp_path / "b", guess_expert_log)
    model_b, tok_b = tiny_chat_model(seed=0)
    run_sft(cut_cfg, model=model_b, tokenizer=tok_b, stop_after=4)  # "killed" after its step-4 checkpoint
    model_c, tok_c = tiny_chat_model(seed=0)  # a fresh process: initial weights, then resume
    resumed = run_sft(cut_cfg, model=model_c, tokenizer=tok_c, resume=True)
    assert resumed.steps == full.steps
    a = [json.loads(x)["loss"] for x in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x)["loss"] for x in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert b == pytest.approx(a, rel=1e-5)
    for p, q in zip(model.parameters(), model_c.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_sft_with_the_optimizer_state_on_disk_trains_the_same_weights_and_resumes(tmp_path, guess_expert_log,
                                                                                  monkeypatch):
    """runtime.optimizer_state_to_disk: moments out of memory for every forward and backward, same training."""
    from agentgym_core.finetune import loop
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    run_sft(_config(tmp_path / "memory", guess_expert_log), model=model, tokenizer=tokenizer)

    optimizers = []
    build = loop.OptimizerStateOnDisk.in_run_dir
    monkeypatch.setattr(loop.OptimizerStateOnDisk, "in_run_dir", classmethod(
        lambda cls, optimizer, run_dir: (optimizers.append(optimizer), build(optimizer, run_dir))[1]))
    on_disk = _config(tmp_path / "disk", guess_expert_log, runtime={"optimizer_state_to_disk": True})
    model_b, tok_b = tiny_chat_model(seed=0)
    moments_at_forward = []
    model_b.register_forward_pre_hook(
        lambda module, args: moments_at_forward.append(len(optimizers[-1].state)) if torch.is_grad_enabled() else None)
    run_sft(on_disk, model=model_b, tokenizer=tok_b, stop_after=4)  # "killed" after its step-4 checkpoint
    model_c, tok_c = tiny_chat_model(seed=0)
    model_c.register_forward_pre_hook(
        lambda module, args: moments_at_forward.append(len(optimizers[-1].state)) if torch.is_grad_enabled() else None)
    run_sft(on_disk, model=model_c, tokenizer=tok_c, resume=True)
    assert len(moments_at_forward) > 4 and set(moments_at_forward) == {0}
    for p, q in zip(model.parameters(), model_c.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)
    assert not list((tmp_path / "disk" / "run").glob("optimizer_state_on_disk*"))  # deleted at the end
    from agentgym_core.training.checkpoint import latest_checkpoint, load_trainer_state

    saved = load_trainer_state(latest_checkpoint(tmp_path / "disk" / "run"))["optimizer"]["state"]
    assert saved and all("exp_avg" in entry for entry in saved.values())  # the checkpoint holds the moments


def test_sft_lora_trains_adapters_only(tmp_path, tiny, guess_expert_log):
    pytest.importorskip("peft")
    from agentgym_core.rl.config import ModelConfig
    from agentgym_core.rl.policy import wrap_lora

    model, tokenizer = tiny
    config = _config(tmp_path, guess_expert_log, model={"lora": {"enabled": True, "r": 4, "alpha": 8,
                                                                 "target_modules": ["q_proj", "v_proj"]}},
                     sft={"epochs": 1})
    lora = wrap_lora(model, ModelConfig.model_validate(config.model.model_dump()))
    base = {k: v.clone() for k, v in lora.state_dict().items() if "lora_" not in k}
    result = run_sft(config, model=lora, tokenizer=tokenizer)
    assert all(torch.equal(v, lora.state_dict()[k]) for k, v in base.items())
    assert (result.checkpoint / "adapter").is_dir() and (result.model_path / "config.json").exists()


def test_warm_start_inside_an_rl_recipe(tmp_path):
    """`warm_start` in an RL TrainConfig: expert demos collected, SFT, evaluated, then RL from the SFT weights."""
    import json

    from agentgym_core.pipeline import run_rl_recipe as train
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pytest.importorskip("agentgym_estimators")
    pm = PluginManager(autoload=True, allow=["transformers", "guess", "estimators"])
    run = tmp_path / "rl"
    recipe = [
        "envs=[{name: guess, max_concurrency: 2}]", f"trainer.run_dir={run}", "trainer.progress=false",
        "trainer.eval_tasks=2", "trainer.tensorboard=false", "rollout.tasks_per_step=1",
        "rollout.group_size=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=256",
        "algorithm.rounds_ctrl.rounds=[2]", "algorithm.kl.coef=0.01",
        "warm_start={expert: {n: 5, max_turns: 8}, sft: {batch_size: 5, epochs: 1}, lr: 0.001, eval_base: true}",
    ]
    config = load_config(None, [*recipe, "trainer.steps=1"])
    model, tokenizer = tiny_chat_model(seed=0)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    results = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)

    demos = [json.loads(x) for x in (run / "warm_start" / "expert.jsonl").read_text().splitlines()]
    assert len(demos) == 5 and all(d["success"] for d in demos)  # binary search always wins in 8 turns
    sft_ckpt = run / "warm_start" / "checkpoints" / "step_000001"
    assert (sft_ckpt / "model").is_dir()
    # Three evaluations on the same tasks and horizon: base, after SFT (= RL's before), after RL.
    assert results["eval_base"]["tasks"] == results["eval_sft"]["tasks"] == results["eval_after"]["tasks"] == 2
    assert results["eval_before"] == {**results["eval_sft"], "step": 0}
    # RL's KL reference is the SFT model: the first step's KL to it is exactly 0 before any RL update.
    first = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in x][0]
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)
    assert any(not torch.equal(initial[k], v) for k, v in model.state_dict().items())

    # A resumed run neither re-collects nor re-trains the warm start; it reads its figures back.
    (run / "warm_start" / "expert.jsonl").write_text("")  # would fail SFT if it were used again
    config2 = load_config(None, [*recipe, "trainer.steps=2"])
    fresh, tokenizer = tiny_chat_model(seed=0)
    again = train(config2, resume=True, plugin_manager=pm, model=fresh, tokenizer=tokenizer)
    assert again["eval_sft"] == results["eval_sft"] and again["eval_base"] == results["eval_base"]
    # On disk: the warm start's one checkpoint, and RL's newest keep_checkpoints (2) of its own.
    assert [p.name for p in (run / "warm_start" / "checkpoints").glob("step_*")] == ["step_000001"]
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_000001", "step_000002"]


def _one_step_after_a_short_warm_start(run):
    """A plugin manager and an RL recipe on guess: a warm start on 2 expert episodes, then 1 GRPO step, 1 eval task."""
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config

    pytest.importorskip("agentgym_estimators")
    pm = PluginManager(autoload=True, allow=["transformers", "guess", "estimators"])
    return pm, load_config(None, [
        "envs=[{name: guess, max_concurrency: 2}]", f"trainer.run_dir={run}", "trainer.progress=false",
        "trainer.eval_tasks=1", "trainer.tensorboard=false", "trainer.steps=1", "rollout.tasks_per_step=1",
        "rollout.group_size=2", "rollout.max_new_tokens=4", "rollout.max_total_tokens=128",
        "algorithm.rounds_ctrl.rounds=[1]", "warm_start={expert: {n: 2, max_turns: 8}, sft: {batch_size: 2}}",
    ])


def test_a_run_stopped_after_its_warm_start_resumes_before_its_first_rl_checkpoint(tmp_path):
    """--resume after the warm start finished but before RL saved anything: RL starts at step 0 from the SFT weights,
    the warm start is neither collected nor trained again, and the step-0 evaluation is logged once."""
    from agentgym_core.pipeline import run_rl_recipe as train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    run = tmp_path / "rl"
    pm, config = _one_step_after_a_short_warm_start(run)
    model, tokenizer = tiny_chat_model(seed=0)
    first = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer, stop_after=0)  # stopped here
    assert not (run / "checkpoints").exists()
    (run / "warm_start" / "expert.jsonl").write_text("")  # would fail SFT if it were used again
    model, tokenizer = tiny_chat_model(seed=0)
    again = train(config, resume=True, plugin_manager=pm, model=model, tokenizer=tokenizer)
    assert again["eval_sft"] == first["eval_sft"] and again["eval_after"]["tasks"] == 1
    logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [(x["kind"], x["step"]) for x in logged] == [("eval", 0), ("train", 1), ("eval", 1)]


def test_warm_start_skips_the_base_model_evaluation_by_default(tmp_path):
    """The base model's evaluation (known to score 0 here, and the slowest) runs only with eval_base: true."""
    from agentgym_core.pipeline import run_rl_recipe as train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pm, config = _one_step_after_a_short_warm_start(tmp_path / "rl")
    model, tokenizer = tiny_chat_model(seed=0)
    results = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    assert results["eval_base"] is None
    assert results["eval_sft"]["tasks"] == results["eval_after"]["tasks"] == 1


def test_warm_start_needs_data_or_expert():
    from pydantic import ValidationError

    from agentgym_core.finetune_options import WarmStartConfig

    with pytest.raises(ValidationError, match="data.paths.*or expert"):
        WarmStartConfig.model_validate({"lr": 1e-5})


@pytest.mark.gpu
def test_sft_steps_on_cuda(tmp_path, guess_expert_log):
    """SFT with the model, its masks and its batches on CUDA."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    model.cuda()
    examples = load_examples(guess_expert_log)
    before = _nll(model, examples)
    result = run_sft(_config(tmp_path, guess_expert_log), model=model, tokenizer=tokenizer)
    assert result.steps == 9 and _nll(model, examples) < before


def test_the_main_job_announces_its_phases():
    from pathlib import Path

    from agentgym_core.pipeline import plan_text
    from agentgym_core.rl.config import load_config

    recipe = Path(__file__).parents[3] / "examples" / "babyai_grpo_cpu.yaml"
    text = plan_text(load_config(recipe))
    assert "1/5 expert demonstrations: 260 episodes" in text
    assert "base model" not in text  # warm_start.eval_base is off in the main recipe
    assert text.strip().endswith("5/5 held-out evaluation after RL: 50 tasks")
    with_base = plan_text(load_config(recipe, ["warm_start.eval_base=true"]))
    assert "2/6 held-out evaluation of the base model: 50 tasks" in with_base


def test_a_finished_warm_start_keeps_its_evaluations_only_under_this_runs_settings(tmp_path):
    """A warm start copied into a run that evaluates otherwise (here: constrained actions) is evaluated again,
    instead of its old figures standing in the final table beside RL's new ones."""
    from agentgym_core.finetune.config import FinetuneConfig, save_finetune_config
    from agentgym_core.finetune.run import _changed_eval_settings

    base = {"kind": "sft", "envs": [{"name": "guess"}], "trainer": {"run_dir": str(tmp_path), "eval_tasks": 4},
            "data": {"paths": ["x.jsonl"]}}
    saved = tmp_path / "config.yaml"
    save_finetune_config(FinetuneConfig.model_validate(base), saved)
    assert _changed_eval_settings(saved, FinetuneConfig.model_validate(base)) == []
    assert _changed_eval_settings(tmp_path / "absent.yaml", FinetuneConfig.model_validate(base)) == []
    constrained = FinetuneConfig.model_validate({**base, "rollout": {"constrain_actions": True}})
    assert _changed_eval_settings(saved, constrained) == ["rollout sampling"]
    other = FinetuneConfig.model_validate({**base, "envs": [{"name": "guess", "env_kwargs": {"hi": 3}}],
                                           "trainer": {"run_dir": str(tmp_path), "eval_tasks": 8}})
    assert _changed_eval_settings(saved, other) == ["envs", "panel size"]
    elsewhere = FinetuneConfig.model_validate({**base, "envs": [{"name": "guess", "max_concurrency": 9}]})
    assert _changed_eval_settings(saved, elsewhere) == []  # how many envs run at once scores nothing differently


def test_an_rl_recipes_warm_start_evaluates_with_its_samples_per_task(tmp_path):
    """trainer.eval_samples reaches the evaluation after the warm start's SFT: both ends of the run's summary
    play the same panel K times a task under one panel hash (the warm start once played one episode a task)."""
    from agentgym_core.evaluation.run_summary import summarize_run
    from agentgym_core.finetune.config import load_finetune_config
    from agentgym_core.pipeline import run_rl_recipe as train
    from agentgym_core.plugins import PluginManager
    from agentgym_core.recipes import ConfigError
    from agentgym_core.rl.config import load_config
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pytest.importorskip("agentgym_estimators")
    with pytest.raises(ConfigError, match="trainer.eval_samples=2 with rollout.eval_temperature=0"):
        load_finetune_config(None, ["kind=sft", "data.paths=[x.jsonl]", "trainer.eval_samples=2"])
    pm = PluginManager(autoload=True, allow=["transformers", "guess", "estimators"])
    run = tmp_path / "rl"
    config = load_config(None, [
        "envs=[{name: guess, max_concurrency: 2}]", f"trainer.run_dir={run}", "trainer.progress=false",
        "trainer.eval_tasks=2", "trainer.eval_samples=3", "rollout.eval_temperature=1.0", "trainer.steps=1",
        "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=256",
        "algorithm.rounds_ctrl.rounds=[2]", "warm_start={expert: {n: 5, max_turns: 8}, sft: {batch_size: 5, epochs: 1}, lr: 0.001}",
    ])
    model, tokenizer = tiny_chat_model(seed=0)
    results = train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    sft, after = results["eval_sft"], results["eval_after"]
    assert (sft["tasks"], sft["samples_per_task"]) == (after["tasks"], after["samples_per_task"]) == (2, 3)
    assert sft["panel_hash"] == after["panel_hash"]
    assert set(sft["per_task"].values()) | set(after["per_task"].values()) <= {0.0, 1 / 3, 2 / 3, 1.0}
    assert summarize_run(results)["samples_per_task"] == 3
