"""Training examples for SFT, DPO and rejection sampling, from the files agentgym and AgentGym write.

An :class:`Example` is what the RL trainer trains on too: ``token_ids`` plus a ``loss_mask`` that
is 1 exactly on the tokens the policy produces (its replies, including the end-of-turn token) and
0 on the prompt, the template and the environment's observations.

Sources (:func:`load_examples` tells them apart line by line):

* our rollout log (``trajectories.jsonl``, format ``agentgym.trajectory/1``): when the line has
  ``tokens`` (``include_tokens``, as ``agentgym collect`` writes), those ids are used as they are;
  otherwise the ``messages`` are tokenised with the model's template (below);
* a training step's trajectory dump (``rollouts``/``trajectories/step_N.jsonl``: whole
  :class:`~agentgym_core.rollout.trajectory.Trajectory` records): their ids as sampled;
* AgentGym's AgentTraj format, one JSON object per line or a JSON list of them:
  ``{"item_id": ..., "conversations": [{"from": "human"|"gpt", "value": ..., "loss": bool|null}]}``;
  ``gpt`` turns are trained unless ``loss`` is false (``loss`` on a human turn is ignored: the
  environment's tokens are never trained).

Tokenising messages uses :class:`agentgym_core.rollout.chat.ChatFormat`, the same incremental
scheme the rollout engine uses: the first prompt is the template's render of the system/user
messages with the generation prompt; each reply is ``encode(content) + [end-of-turn id]``
(trained); what follows a reply is ``encode(closing + user prefix + observation + user suffix)``
(not trained). So an expert's trajectory has exactly the token layout (and mask) a sampled one
would have had, had the model produced the same text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_core.rollout.chat import ChatFormat
from agentgym_core.rollout.logs import LOG_FORMAT
from agentgym_core.rollout.trajectory import Trajectory

__all__ = [
    "DataFormatError",
    "Example",
    "TokenizerChat",
    "agenttraj_messages",
    "load_examples",
    "tokenize_messages",
]


class DataFormatError(ValueError):
    """A data file line is neither an agentgym trajectory nor an AgentTraj conversation."""


@dataclass
class Example:
    """One multi-turn sequence to train on; ``loss_mask`` 1 on the policy's own tokens."""

    token_ids: list[int]
    loss_mask: list[int]
    env: str = ""
    task_id: int | None = None
    success: bool = True
    num_turns: int = 0
    reward: float = 0.0
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.loss_mask):
            raise ValueError(f"token_ids ({len(self.token_ids)}) and loss_mask ({len(self.loss_mask)}) differ in length")

    @property
    def num_trained_tokens(self) -> int:
        return sum(self.loss_mask)

    @classmethod
    def from_trajectory(cls, traj: Trajectory, source: str = "") -> Example:
        """The trajectory's ids as sampled, its mask, its outcome."""
        return cls(list(traj.token_ids), list(traj.loss_mask), env=traj.env, task_id=traj.task_id,
                   success=traj.success, num_turns=traj.num_turns, reward=traj.outcome_reward, source=source,
                   meta={"env_failure": traj.failed})


class TokenizerChat:
    """The tokenizer side of a rollout backend over a Hugging Face tokenizer (what ChatFormat needs).

    It renders, encodes and decodes exactly as the transformers backend does, so examples built
    here line up token for token with trajectories that backend samples.
    """

    name = "tokenizer"

    def __init__(self, tokenizer: Any, extra_eos_ids: Iterable[int] = ()) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat_template; agentgym renders turns with the model's own template")
        self.tokenizer = tokenizer
        eos = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
        eos.update(int(t) for t in extra_eos_ids)
        if not eos:
            raise ValueError("the tokenizer names no EOS token; pass extra_eos_ids")
        self.eos_token_ids = frozenset(eos)

    @classmethod
    def for_model(cls, model: Any, tokenizer: Any) -> TokenizerChat:
        """Like the transformers backend: the tokenizer's EOS plus the model's generation-config EOS ids."""
        cfg_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        extra = [] if cfg_eos is None else (cfg_eos if isinstance(cfg_eos, list) else [cfg_eos])
        return cls(tokenizer, extra)

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool,
                            tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        return self.tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  tools=[dict(t) for t in tools] if tools else None)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)


def _end_of_turn_id(chat: ChatFormat, with_system: bool, tools: Sequence[Mapping[str, Any]] | None) -> int | None:
    """The EOS id whose text starts the template's reply suffix (ChatML: ``<|im_end|>``), if any."""
    suffix = chat.probe(with_system, tools).reply_suffix
    for eos in sorted(chat.backend.eos_token_ids):
        text = chat.backend.decode([eos])
        if text and suffix.startswith(text):
            return eos
    return None


def tokenize_messages(
    chat: ChatFormat, messages: Sequence[Mapping[str, str]], *, train: Sequence[bool] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[list[int], list[int]]:
    """``(token_ids, loss_mask)`` of a chat, laid out as the rollout engine lays out a trajectory.

    ``messages``: optional system message, a user message, then alternating assistant/user
    messages (a final user message, the last observation, is dropped: nothing after the last
    reply is trained, as in the trajectory record). ``train[k]`` says whether the k-th assistant
    message is trained (default: all); an untrained reply keeps its tokens with mask 0. ``tools``: the
    schemas the template rendered the chat with (a rollout log's ``tools``, from native tool calls).
    """
    msgs = [dict(m) for m in messages]
    with_system = bool(msgs) and msgs[0]["role"] == "system"
    head = 2 if with_system else 1
    if len(msgs) < head + 1 or msgs[head - 1]["role"] != "user":
        raise DataFormatError("a chat to train on needs [system,] user, assistant, ... messages; got roles "
                              f"{[m['role'] for m in msgs]}")
    while msgs and msgs[-1]["role"] != "assistant":
        msgs.pop()
    body = msgs[head:]
    for k, m in enumerate(body):
        want = "assistant" if k % 2 == 0 else "user"
        if m["role"] != want:
            raise DataFormatError(f"message {head + k} has role {m['role']!r}, expected {want!r}: turns must alternate")
    replies = body[0::2]
    train = list(train) if train is not None else [True] * len(replies)
    if len(train) != len(replies):
        raise ValueError(f"train has {len(train)} flags for {len(replies)} assistant messages")
    eos = _end_of_turn_id(chat, with_system, tools)
    reply_prefix = chat.probe(with_system, tools).reply_prefix
    ids = chat.prompt_ids(msgs[:head], tools)
    mask = [0] * len(ids)
    for k, reply in enumerate(replies):
        reply_ids = chat.backend.encode(reply_prefix + reply["content"])
        if eos is not None:
            reply_ids.append(eos)
        ids += reply_ids
        mask += [int(train[k])] * len(reply_ids)
        if 2 * k + 1 < len(body):  # the observation that answered this reply
            context = chat.turn_ids(reply_ids, body[2 * k + 1]["content"], with_system=with_system, tools=tools)
            ids += context
            mask += [0] * len(context)
    return ids, mask


# -- AgentTraj ----------------------------------------------------------------------------------

_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def agenttraj_messages(conversations: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, str]], list[bool]]:
    """Messages and per-reply train flags of one AgentTraj ``conversations`` list.

    AgentGym's data puts the task instruction in the first human turn and has the model answer
    "OK" before the first observation; that exchange is kept as is (it is what AgentGym trains on).
    """
    messages: list[dict[str, str]] = []
    train: list[bool] = []
    for i, turn in enumerate(conversations):
        who = turn.get("from")
        if who not in _ROLES:
            raise DataFormatError(f"conversations[{i}]: 'from' is {who!r}; expected one of {sorted(_ROLES)}")
        role = _ROLES[who]
        if role == "assistant":
            train.append(turn.get("loss") is not False)
        messages.append({"role": role, "content": str(turn.get("value", ""))})
    return messages, train


def _agenttraj_task(item_id: Any) -> tuple[str, int | None]:
    """AgentGym names items ``<env>_<index>`` (``babyai_12``): (env, index), or ("", None) otherwise."""
    if isinstance(item_id, str) and "_" in item_id:
        env, _, index = item_id.rpartition("_")
        if index.isdigit():
            return env, int(index)
    return "", None


# -- loading ------------------------------------------------------------------------------------

def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):  # AgentGym ships AgentTraj as one JSON list
        for i, item in enumerate(json.loads(text)):
            yield i + 1, item
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(f"{path}:{number}: not JSON ({exc})") from None


def _example(record: dict[str, Any], chat: ChatFormat | None, where: str) -> Example | None:
    def need_chat() -> ChatFormat:
        if chat is None:
            raise DataFormatError(f"{where}: this record has no token ids, so a tokenizer is needed to read it "
                                  "(pass chat=ChatFormat(TokenizerChat(tokenizer)))")
        return chat

    if "conversations" in record:
        messages, train = agenttraj_messages(record["conversations"])
        ids, mask = tokenize_messages(need_chat(), messages, train=train)
        reward = float(record.get("reward", 1.0))
        success = bool(record.get("success", reward > 0))
        env, task = _agenttraj_task(record.get("item_id"))
        return Example(ids, mask, env=str(record.get("env", env)), task_id=task, success=success,
                       num_turns=sum(train), reward=reward, source=where, meta={"item_id": record.get("item_id")})
    if record.get("format") == LOG_FORMAT:
        tokens = record.get("tokens")
        if tokens:
            ids, mask = list(tokens["token_ids"]), list(tokens["loss_mask"])
        else:
            ids, mask = tokenize_messages(need_chat(), record["messages"], tools=record.get("tools"))
        return Example(ids, mask, env=record["env"], task_id=record["task_id"], success=bool(record["success"]),
                       num_turns=int(record["num_turns"]), reward=float(record["outcome_reward"]), source=where,
                       meta={"env_failure": bool(record.get("failed"))})
    if "token_ids" in record and "loss_mask" in record:
        return Example.from_trajectory(Trajectory.model_validate(record), source=where)
    raise DataFormatError(f"{where}: neither an agentgym trajectory (format {LOG_FORMAT!r}, or a Trajectory "
                          "dump with token_ids/loss_mask) nor an AgentTraj record (with 'conversations')")


def load_examples(paths: str | Path | Sequence[str | Path], chat: ChatFormat | None = None) -> list[Example]:
    """Every example in the given files (JSONL or a JSON list), in file order.

    Records without token ids (AgentTraj, or rollout logs written without ``include_tokens``) are
    tokenised with ``chat`` (see the module docstring). Examples with no trained token are dropped.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out: list[Example] = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise FileNotFoundError(f"training data {str(path)!r} does not exist; write it with `agentgym collect` "
                                    "or point data.paths at a rollout log / AgentTraj file")
        for number, record in _records(path):
            example = _example(record, chat, f"{path}:{number}")
            if example is not None and example.num_trained_tokens > 0:
                out.append(example)
    return out
