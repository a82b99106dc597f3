"""DPO: the loss against a hand computation, multi-turn log-probs over assistant tokens, training, resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

from agentgym_core.finetune.config import FinetuneConfig
from agentgym_core.finetune.data import Example, TokenizerChat, tokenize_messages
from agentgym_core.finetune.dpo import dpo_loss, make_pairs, run_dpo, sequence_logprobs
from agentgym_core.rollout.chat import ChatFormat
from agentgym_core.viewer.metric_docs import undocumented, undocumented_message


def test_dpo_loss_matches_hand_computation():
    # pi(w) = -3, pi(l) = -5, ref(w) = ref(l) = -4, beta = 0.1:
    # h = 0.1 * ((-3 + 4) - (-5 + 4)) = 0.2; loss = -log sigmoid(0.2) = log(1 + e^-0.2) = 0.598139
    loss = dpo_loss(torch.tensor([-3.0]), torch.tensor([-5.0]), torch.tensor([-4.0]), torch.tensor([-4.0]), beta=0.1)
    assert float(loss) == pytest.approx(math.log(1 + math.exp(-0.2)), abs=1e-6)
    assert float(loss) == pytest.approx(0.598139, abs=1e-6)
    # cDPO with eps = 0.1: 0.9 * log(1 + e^-0.2) + 0.1 * log(1 + e^0.2) = 0.617810
    smoothed = dpo_loss(torch.tensor([-3.0]), torch.tensor([-5.0]), torch.tensor([-4.0]), torch.tensor([-4.0]),
                        beta=0.1, label_smoothing=0.1)
    assert float(smoothed) == pytest.approx(0.9 * math.log(1 + math.exp(-0.2)) + 0.1 * math.log(1 + math.exp(0.2)), abs=1e-6)
    # Policy equal to the reference: log 2 whatever the log-probs.
    same = dpo_loss(torch.tensor([-7.0, -1.0]), torch.tensor([-2.0, -9.0]), torch.tensor([-7.0, -1.0]),
                    torch.tensor([-2.0, -9.0]), beta=0.5)
    assert same.tolist() == pytest.approx([math.log(2)] * 2)


def _chat_example(chat, replies, observations, *, task, success):
    messages = [{"role": "system", "content": "Say a colour. Reply Thought: ... Action: <colour>"},
                {"role": "user", "content": "Which colour am I thinking of?"}]
    for reply, obs in zip(replies, observations, strict=True):
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
    ids, mask = tokenize_messages(chat, messages)
    return Example(ids, mask, env="word", task_id=task, success=success, num_turns=len(replies),
                   reward=1.0 if success else 0.0)


@pytest.fixture
def toy_pairs(tiny):
    """Per task: a 1-turn success and a 2-turn failure (multi-turn, with observations in between)."""
    model, tokenizer = tiny
    chat = ChatFormat(TokenizerChat.for_model(model, tokenizer))
    colours = ["red", "blue", "green", "grey"]
    examples = []
    for task, colour in enumerate(colours):
        wrong = colours[(task + 1) % 4]
        examples.append(_chat_example(chat, [f"Thought: easy.\nAction: {colour}"], ["Correct!"], task=task, success=True))
        examples.append(_chat_example(chat, [f"Thought: hmm.\nAction: {wrong}", f"Thought: no.\nAction: {wrong}"],
                                      [f"No. It starts with {colour[0]}.", "No."], task=task, success=False))
    return examples


def test_sequence_logprobs_sum_assistant_tokens_only(tiny, toy_pairs):
    model, _ = tiny
    packed, _ = sequence_logprobs(model, toy_pairs[:2])
    for example, value in zip(toy_pairs[:2], packed.tolist(), strict=True):
        ids = torch.tensor([example.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)  # (T-1, V)
        token_lp = logp.gather(-1, ids[0, 1:, None]).squeeze(-1)  # log p(token t | < t), t >= 1
        hand = sum(float(lp) for lp, m in zip(token_lp, example.loss_mask[1:], strict=True) if m)
        assert value == pytest.approx(hand, abs=1e-4)
        assert example.num_turns == 1 or sum(1 for a, b in zip(example.loss_mask, example.loss_mask[1:], strict=False) if b > a) == 2


def test_pairs_are_success_vs_failure_of_the_same_task(toy_pairs):
    pairs = make_pairs(toy_pairs, pairs_per_task=4)
    assert len(pairs) == 4  # one success x one failure per task
    for c, r in pairs:
        assert toy_pairs[c].success and not toy_pairs[r].success and toy_pairs[c].task_id == toy_pairs[r].task_id


def _config(run_dir, **dpo):
    return FinetuneConfig.model_validate({
        "kind": "dpo", "data": {"paths": ["unused.jsonl"]}, "optim": {"lr": 5e-3},
        "dpo": {"beta": 0.5, "epochs": 4, "batch_pairs": 2, **dpo},
        "trainer": {"run_dir": str(run_dir), "eval_tasks": 0, "progress": False, "save_every": 2}})


def test_dpo_prefers_the_successful_trajectory(tmp_path, tiny, toy_pairs):
    model, tokenizer = tiny
    result = run_dpo(_config(tmp_path / "run"), model=model, tokenizer=tokenizer, examples=toy_pairs)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["loss"] == pytest.approx(math.log(2), abs=1e-4)  # the policy starts as the reference
    assert lines[-1]["loss"] < 0.5 and lines[-1]["accuracy"] == 1.0
    keys = {k for x in lines for k in x}
    assert not undocumented(keys), undocumented_message(keys, "DPO")  # the docs' "What a run logs"
    assert result.steps == 8 and (result.model_path / "config.json").exists()


def test_dpo_resume_matches_uninterrupted(tmp_path, toy_pairs):
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model_a, tok = tiny_chat_model(seed=0)
    run_dpo(_config(tmp_path / "a"), model=model_a, tokenizer=tok, examples=toy_pairs)
    model_b, tok = tiny_chat_model(seed=0)
    run_dpo(_config(tmp_path / "b"), model=model_b, tokenizer=tok, examples=toy_pairs, stop_after=4)
    model_c, tok = tiny_chat_model(seed=0)  # fresh initial weights: the reference comes from them
    run_dpo(_config(tmp_path / "b"), model=model_c, tokenizer=tok, examples=toy_pairs, resume=True)
    a = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in b] == list(range(1, 9))
    assert [x["loss"] for x in b] == pytest.approx([x["loss"] for x in a], rel=1e-5)
    for p, q in zip(model_a.parameters(), model_c.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)
