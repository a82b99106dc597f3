"""warm_start.replay: the warm start's SFT examples join every RL update (PPO-ptx)."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch

from agentgym_core.rl.config import AlgorithmConfig
from agentgym_core.rl.forward import forward_tokens
from agentgym_core.rl.sft_replay import check_replay_pool, replay_fields
from agentgym_core.rl.update import UpdateInputs, ppo_update


def _sequences(vocab: int, lengths: list[int], seed: int) -> tuple[list[list[int]], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
    mask = torch.zeros(len(seqs), max(lengths))
    for i, n in enumerate(lengths):
        mask[i, 8:n] = 1.0  # a prompt of 8 tokens, then the trained ones
    return seqs, mask


def _update_delta(model: torch.nn.Module, inputs: UpdateInputs, config: AlgorithmConfig) -> dict[str, torch.Tensor]:
    """What one ppo_update with plain SGD at lr 1 subtracts from each weight: the gradient it stepped on."""
    m = copy.deepcopy(model)
    before = {k: v.detach().clone() for k, v in m.named_parameters()}
    optimizer = torch.optim.SGD(m.parameters(), lr=1.0)
    ppo_update(m, optimizer, inputs, config, temperature=1.0, generator=torch.Generator().manual_seed(0))
    return {k: before[k] - v.detach() for k, v in m.named_parameters()}


def test_the_update_steps_on_coef_times_the_replay_nll_over_all_its_micro_batches():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=5)
    vocab = model.config.vocab_size
    seqs, mask = _sequences(vocab, [30, 22], seed=0)
    replay_seqs, replay_mask = _sequences(vocab, [40, 27, 33], seed=1)
    # zero advantages: the policy-gradient term moves nothing, so the step is the replay term's alone
    config = AlgorithmConfig(micro_batch_tokens=64, kl={"coef": 0.0}, max_grad_norm=None)
    inputs = UpdateInputs(sequences=seqs, mask=mask, advantages=torch.zeros_like(mask), returns=torch.zeros_like(mask),
                          old_logprobs=None, replay_sequences=replay_seqs, replay_mask=replay_mask, replay_coef=0.5)
    delta = _update_delta(model, inputs, config)

    expected = copy.deepcopy(model)
    logp = forward_tokens(expected, replay_seqs, replay_mask, max_tokens=4096, packing=False).logprobs
    nll = -(logp[:, : replay_mask.shape[1]] * replay_mask).sum() / replay_mask.sum()  # one mean over every example
    (0.5 * nll).backward()
    for name, p in expected.named_parameters():
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        torch.testing.assert_close(delta[name], grad, rtol=1e-3, atol=1e-6, msg=name)
    assert any(float(d.abs().max()) > 0 for d in delta.values())

    without = _update_delta(model, UpdateInputs(sequences=seqs, mask=mask, advantages=torch.zeros_like(mask),
                                                returns=torch.zeros_like(mask), old_logprobs=None), config)
    assert all(float(d.abs().max()) == 0 for d in without.values())  # and without replay, no step at all


def _config(coef: float, examples: int = 3, seed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(warm_start=SimpleNamespace(replay=SimpleNamespace(coef=coef, examples=examples)),
                           trainer=SimpleNamespace(seed=seed))


def test_each_step_draws_a_seeded_slice_of_the_pool_with_a_right_padded_mask():
    pool = [([1, 2, 3], [0, 1, 1]), ([4, 5], [0, 1]), ([6, 7, 8, 9], [0, 0, 1, 1]), ([10, 11], [1, 1])]
    config = _config(0.2, examples=3)
    first = replay_fields(pool, config, 0, torch.device("cpu"))
    assert first["replay_coef"] == 0.2 and len(first["replay_sequences"]) == 3
    for seq, row in zip(first["replay_sequences"], first["replay_mask"], strict=True):
        ids, mask = next(p for p in pool if p[0] == seq)
        assert row.tolist() == [*mask, *[0.0] * (first["replay_mask"].shape[1] - len(mask))]
    again = replay_fields(pool, config, 0, torch.device("cpu"))
    assert again["replay_sequences"] == first["replay_sequences"]  # a resumed run replays what it would have
    steps = [replay_fields(pool, config, s, torch.device("cpu"))["replay_sequences"] for s in range(4)]
    seen = [tuple(s) for step in steps for s in step]
    assert {tuple(p[0]) for p in pool} <= set(seen)  # every example comes round: per-epoch shuffles
    few = replay_fields(pool[:2], _config(0.2, examples=8), 0, torch.device("cpu"))
    assert sorted(map(tuple, few["replay_sequences"])) == [(1, 2, 3), (4, 5)]  # never more than the pool, no repeats


def test_replay_is_refused_before_any_work_without_examples_or_with_broken_ones():
    assert check_replay_pool(_config(0.0), None) is None  # off: nothing needed
    assert check_replay_pool(SimpleNamespace(warm_start=None), None) is None
    with pytest.raises(ValueError, match="warm_start.replay.coef > 0.*agentgym train"):
        check_replay_pool(_config(0.1), None)
    with pytest.raises(ValueError, match="replay example 1.*same length"):
        check_replay_pool(_config(0.1), [([1, 2], [0, 1]), ([1, 2, 3], [1, 1])])
    with pytest.raises(ValueError, match="replay example 0.*trained token"):
        check_replay_pool(_config(0.1), [([1, 2], [0, 0])])


def test_train_refuses_replay_without_examples_before_loading_anything(tmp_path):
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.trainer import train

    config = load_config(None, ["envs=[{name: guess}]", f"trainer.run_dir={tmp_path}",
                                "warm_start={expert: {n: 2}, replay: {coef: 0.1}}"])
    with pytest.raises(ValueError, match="warm_start.replay.coef > 0"):
        train(config)
    assert not any(tmp_path.iterdir())


def test_a_recipe_with_replay_trains_on_its_warm_start_examples(tmp_path):
    """The pipeline hands the warm start's own examples to RL; every update logs their NLL."""
    from agentgym_core.finetune.run import warm_start_examples
    from agentgym_core.pipeline import plan_text, run_rl_recipe
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pytest.importorskip("agentgym_estimators")
    pm = PluginManager(autoload=True, allow=["transformers", "guess", "estimators"])
    run = tmp_path / "rl"
    config = load_config(None, [
        "envs=[{name: guess, max_concurrency: 2}]", f"trainer.run_dir={run}", "trainer.progress=false",
        "trainer.eval_tasks=0", "trainer.tensorboard=false", "trainer.steps=2", "rollout.tasks_per_step=2",
        "rollout.group_size=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=256",
        "algorithm.rounds_ctrl.rounds=[2]", "algorithm.kl.coef=0.0", "algorithm.drop_zero_advantage=false",
        "warm_start={expert: {n: 4, max_turns: 8}, sft: {batch_size: 4, epochs: 1}, lr: 0.001,"
        " replay: {coef: 0.5, examples: 3}}",
    ])
    assert "each update replaying 3 SFT examples" in plan_text(config)  # the plan printed first says so
    model, tokenizer = tiny_chat_model(seed=0)
    run_rl_recipe(config, plugin_manager=pm, model=model, tokenizer=tokenizer)

    pool = warm_start_examples(config, model, tokenizer)
    demos = [json.loads(x) for x in (run / "warm_start" / "expert.jsonl").read_text().splitlines()]
    assert [ids for ids, _ in pool] == [d["tokens"]["token_ids"] for d in demos if d["success"]]
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in x]
    assert len(steps) == 2
    for m in steps:  # a tiny random model after one SFT step: the demos' NLL is far from zero
        assert m["sft_replay_loss"] > 0.1 and m["optimizer_steps"] == 1
