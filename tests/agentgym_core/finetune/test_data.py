"""Masks and data formats: the policy's tokens are trained, the environment's never."""

from __future__ import annotations

import json

import pytest

from agentgym_core.finetune.data import (
    DataFormatError,
    TokenizerChat,
    agenttraj_messages,
    load_examples,
    tokenize_messages,
)
from agentgym_core.rollout.chat import ChatFormat
from agentgym_core.rollout.logs import read_rollout_log


def _runs(mask):
    """(start, end, value) runs of a 0/1 mask."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((start, i, mask[start]))
            start = i
    return runs


def test_expert_trajectories_pass_the_rl_trajectory_audit(tiny, pm):
    """Expert trajectories are laid out as the engine lays out sampled ones (spans, mask, template)."""
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.finetune.experts import expert_trajectory, get_expert, play_expert
    from agentgym_core.testing import check_trajectory
    from agentgym_env_guess.env import GuessEnv

    model, tokenizer = tiny
    backend = TransformersBackend(model, tokenizer)
    chat = ChatFormat(backend)  # the engine's own ChatFormat over the real backend
    for task in (0, 1, 905):
        recording, error = play_expert(get_expert("guess", pm), GuessEnv(), task)
        traj = expert_trajectory(recording, chat, env_name="guess", error=error)
        assert error is None and traj.success and traj.terminated and traj.num_turns >= 1
        report = check_trajectory(traj, backend, recompute_logprobs=False)
        assert report.text_matches_template and report.tokens_match_template
        # Mask 1 exactly on the replies' spans.
        assert traj.loss_mask == [int(any(t.action_span.start <= i < t.action_span.end for t in traj.turns))
                                  for i in range(len(traj.token_ids))]


def test_expert_turn_budget_truncates(tiny, pm):
    from agentgym_core.finetune.experts import expert_trajectory, get_expert, play_expert
    from agentgym_env_guess.env import GuessEnv

    _, tokenizer = tiny
    recording, error = play_expert(get_expert("guess", pm), GuessEnv(), 3, max_turns=2)
    traj = expert_trajectory(recording, ChatFormat(TokenizerChat(tokenizer)), env_name="guess", error=error)
    assert error == "max_turns" and traj.num_turns == 2 and traj.truncation_reason == "max_turns"
    assert not traj.success and not traj.failed


def test_mask_covers_replies_and_end_of_turn_only(guess_expert_log, tiny):
    _, tokenizer = tiny
    for record in read_rollout_log(guess_expert_log):
        ids, mask = record["tokens"]["token_ids"], record["tokens"]["loss_mask"]
        trained = [tokenizer.decode(ids[s:e]) for s, e, v in _runs(mask) if v == 1]
        replies = [m["content"] for m in record["messages"] if m["role"] == "assistant"]
        assert trained == [r + "<|im_end|>" for r in replies]
        context = "".join(tokenizer.decode(ids[s:e]) for s, e, v in _runs(mask) if v == 0)
        observations = [m["content"] for m in record["messages"][1:-1] if m["role"] == "user"]
        for obs in observations:  # every observation but the last (never tokenised) is context
            assert obs in context
        assert record["messages"][0]["content"] in context  # the instruction
        for reply in replies:  # and no reply is in the context
            assert reply not in context


def test_loaded_examples_keep_the_logged_ids(guess_expert_log):
    examples = load_examples(guess_expert_log)  # tokens are in the log: no tokenizer needed
    records = list(read_rollout_log(guess_expert_log))
    assert [e.token_ids for e in examples] == [r["tokens"]["token_ids"] for r in records]
    assert all(e.success and e.env == "guess" and e.num_turns >= 1 for e in examples)


def test_log_without_tokens_is_retokenised_identically(guess_expert_log, tmp_path, tiny):
    model, tokenizer = tiny
    stripped = tmp_path / "no_tokens.jsonl"
    lines = []
    for record in read_rollout_log(guess_expert_log):
        record.pop("tokens")
        lines.append(json.dumps(record))
    stripped.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match="tokenizer is needed"):
        load_examples(stripped)
    chat = ChatFormat(TokenizerChat.for_model(model, tokenizer))
    again = load_examples(stripped, chat)
    assert [e.token_ids for e in again] == [e.token_ids for e in load_examples(guess_expert_log)]
    assert [e.loss_mask for e in again] == [e.loss_mask for e in load_examples(guess_expert_log)]


AGENTTRAJ = {
    "item_id": "babyai_12",
    "conversations": [
        {"from": "human", "value": "You are an agent in a grid. Reply Thought: ... Action: ...", "loss": None},
        {"from": "gpt", "value": "OK", "loss": False},
        {"from": "human", "value": "Your goal: go to the red ball. You see a red ball 2 steps ahead.", "loss": None},
        {"from": "gpt", "value": "Thought: it is ahead.\nAction: go to red ball 1", "loss": True},
        {"from": "human", "value": "You reached the red ball.", "loss": None},
        {"from": "gpt", "value": "Thought: done.\nAction: check available actions", "loss": None},
    ],
}


def test_agenttraj_import(tmp_path, tiny):
    model, tokenizer = tiny
    messages, train = agenttraj_messages(AGENTTRAJ["conversations"])
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert train == [False, True, True]  # loss false -> not trained; null on gpt -> trained
    path = tmp_path / "agenttraj.json"
    path.write_text(json.dumps([AGENTTRAJ, AGENTTRAJ]))  # AgentGym ships a JSON list
    chat = ChatFormat(TokenizerChat.for_model(model, tokenizer))
    examples = load_examples(path, chat)
    assert len(examples) == 2 and examples[0].meta["item_id"] == "babyai_12"
    assert (examples[0].env, examples[0].task_id) == ("babyai", 12)  # AgentGym's <env>_<index> item ids
    ids, mask = examples[0].token_ids, examples[0].loss_mask
    trained = [tokenizer.decode(ids[s:e]) for s, e, v in _runs(mask) if v == 1]
    assert trained == ["Thought: it is ahead.\nAction: go to red ball 1<|im_end|>",
                       "Thought: done.\nAction: check available actions<|im_end|>"]
    # The untrained "OK" reply and every human turn are in the sequence, with mask 0.
    text = tokenizer.decode(ids)
    assert "OK<|im_end|>" in text and "You reached the red ball." in text
    # The whole render, but for the template's closing of the last reply (as in a sampled trajectory).
    assert tokenizer.decode(ids) + "\n" == tokenizer.apply_chat_template(messages, tokenize=False)
    # The same file as JSONL reads the same.
    jsonl = tmp_path / "agenttraj.jsonl"
    jsonl.write_text(json.dumps(AGENTTRAJ) + "\n")
    assert load_examples(jsonl, chat)[0].token_ids == ids


def test_bad_records_say_what_is_wrong(tmp_path, tiny):
    model, tokenizer = tiny
    chat = ChatFormat(TokenizerChat.for_model(model, tokenizer))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"conversations": [{"from": "robot", "value": "hi"}]}) + "\n")
    with pytest.raises(DataFormatError, match="'from' is 'robot'"):
        load_examples(bad, chat)
    bad.write_text(json.dumps({"hello": 1}) + "\n")
    with pytest.raises(DataFormatError, match="neither an agentgym trajectory"):
        load_examples(bad, chat)
    with pytest.raises(DataFormatError, match="alternate"):
        tokenize_messages(chat, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                 {"role": "assistant", "content": "c"}])


def test_babyai_expert_thoughts_restate_the_mission(tiny):
    """BabyAI demonstrations say the goal before each action (what a small model must attend to)."""
    pytest.importorskip("agentgym_env_babyai")
    from agentgym_core.finetune.experts import expert_trajectory, get_expert, play_expert
    from agentgym_core.plugins import PluginManager
    from agentgym_env_babyai import BabyAIEnv

    _, tokenizer = tiny
    expert = get_expert("babyai", PluginManager(autoload=True, allow=["babyai"]))
    recording, error = play_expert(expert, BabyAIEnv(), 1804, max_turns=6)
    traj = expert_trajectory(recording, ChatFormat(TokenizerChat(tokenizer)), env_name="babyai", error=error,
                             thought=expert.thought)
    mission = recording.reset_result.info["mission"]
    replies = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    assert replies and len(replies) == traj.num_turns
    for reply, turn in zip(replies, traj.turns, strict=True):
        assert reply == f"Thought: My goal is to {mission}. I will {turn.action}.\nAction: {turn.action}"
        assert turn.text == reply
