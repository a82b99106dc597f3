"""Frozen partners for TextArena's two-player games: who plays the seat the trained policy does not.

A partner's moves are made inside the environment's ``step`` (and ``reset``, when the partner moves
first), so what the policy reads of them is environment text: observation tokens, which carry loss
mask 0 and are never trained. Three kinds, chosen by the ``partner`` option of ``TextArenaEnv``:

* ``"random"`` (default): a scripted policy that picks, with a generator seeded by the task, one of
  the moves the game lists in its latest message (``Available Moves: '[0]', '[4]'``); when the game
  lists none, one of the bracketed moves its rules show (``For example: '[col 4]'``).
* ``"package.module:function"``: your scripted policy, ``function(observation, player_id) -> move``.
* ``{"model": "<local model folder>"}``: a fixed model, greedy, e.g. an earlier checkpoint of the
  policy being trained (``runs/x/checkpoints/step_000004/model``), which is self-play against a
  frozen copy. Options: ``max_new_tokens`` (default 32).

A move the game refuses is replaced by a random listed move, so a partner that cannot play legally
(an untrained model) never forfeits; ``info["partner_refused"]`` counts those in the episode.

Every partner is a plain JSON value, so the option crosses ``agentgym serve --env-kwargs``.
"""

from __future__ import annotations

import functools
import importlib
import random
import re
from collections.abc import Callable
from typing import Any, Protocol

from agentgym_core.env import parse_react_action

__all__ = ["ModelPartner", "Partner", "RandomListedMove", "ScriptedPartner", "listed_moves", "make_partner"]

_QUOTED_MOVE = re.compile(r"'(\[[^\]'\n]{1,40}\])'")
_BRACKETED = re.compile(r"\[[^\]\n]{1,40}\]")

PARTNER_INSTRUCTION = (
    "You play a two-player game from TextArena. The observation states the rules, the move syntax and "
    "the board. Reply with one line `Action: <move>`, the move written exactly as the rules show it."
)


class Partner(Protocol):
    """The policy of the other seat: reads its observation, returns its move."""

    def start(self, seed: int) -> None:
        """A new game begins (``seed``: the task's instance, for reproducible play)."""

    def act(self, observation: str, player_id: int) -> str:
        """The move of ``player_id`` given everything the game has told that player so far."""


def listed_moves(observation: str) -> list[str]:
    """The moves the game offers: the quoted ``'[move]'`` list of its latest message that has one, else
    every bracketed move its text shows."""
    for block in reversed(observation.split("\n\n")):
        quoted = _QUOTED_MOVE.findall(block)
        if quoted:
            return list(dict.fromkeys(quoted))
    return list(dict.fromkeys(_BRACKETED.findall(observation)))


class RandomListedMove:
    """A scripted partner: a uniformly random move among those the game lists (see :func:`listed_moves`)."""

    def __init__(self) -> None:
        self._rng = random.Random(0)

    def start(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def act(self, observation: str, player_id: int) -> str:
        moves = listed_moves(observation)
        return self._rng.choice(moves) if moves else "[pass]"


class ScriptedPartner:
    """Your function ``(observation, player_id) -> move``, named ``"package.module:function"``."""

    def __init__(self, path: str) -> None:
        module, _, name = path.partition(":")
        try:
            self._function: Callable[[str, int], str] = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise ValueError(
                f"partner {path!r}: cannot import {name!r} from {module!r} ({exc}); name a function as "
                "'package.module:function' taking (observation, player_id) and returning a move"
            ) from exc

    def start(self, seed: int) -> None:
        pass

    def act(self, observation: str, player_id: int) -> str:
        return str(self._function(observation, player_id))


class ModelPartner:
    """A fixed causal language model from a local folder, decoding greedily; its weights never change.

    It reads the game as one user message (the rules and everything since, the latest text kept when
    it grows past the model's budget) and its reply's ``Action:`` line is its move.
    """

    def __init__(self, model: str, max_new_tokens: int = 32, max_prompt_tokens: int = 1536) -> None:
        self.path, self.max_new_tokens, self.max_prompt_tokens = model, max_new_tokens, max_prompt_tokens
        self._model: Any = None
        self._tokenizer: Any = None
        self._seen: dict[int, str] = {}

    def _load(self) -> None:
        self._model, self._tokenizer = _frozen_model(self.path)

    def start(self, seed: int) -> None:
        self._seen = {}

    def act(self, observation: str, player_id: int) -> str:
        import torch

        if self._model is None:
            self._load()
        self._seen[player_id] = f"{self._seen.get(player_id, '')}\n\n{observation}".strip()
        messages = [
            {"role": "system", "content": PARTNER_INSTRUCTION},
            {"role": "user", "content": self._seen[player_id]},
        ]
        ids = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
        if not isinstance(ids, torch.Tensor):  # newer tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        ids = ids[:, -self.max_prompt_tokens :]
        with torch.no_grad():
            out = self._model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=self._tokenizer.pad_token_id or self._tokenizer.eos_token_id,
            )
        reply = self._tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        return parse_react_action(reply)


@functools.lru_cache(maxsize=4)
def _frozen_model(path: str) -> tuple[Any, Any]:
    """One copy of a partner model per process, shared by every environment instance that names it (the
    calls into it are serialised by the adapter's lock, and its weights never change)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    model.requires_grad_(False)
    return model, tokenizer


def make_partner(spec: str | dict[str, Any]) -> Partner:
    """The partner a ``partner`` option names (see the module docstring)."""
    if spec == "random":
        return RandomListedMove()
    if isinstance(spec, str) and ":" in spec:
        return ScriptedPartner(spec)
    if isinstance(spec, dict) and isinstance(spec.get("model"), str):
        unknown = set(spec) - {"model", "max_new_tokens", "max_prompt_tokens"}
        if unknown:
            raise ValueError(
                f"partner: unknown keys {sorted(unknown)}; a model partner takes model, "
                "max_new_tokens, max_prompt_tokens"
            )
        return ModelPartner(**spec)
    raise ValueError(
        f"partner: {spec!r} is not a partner; use 'random', 'package.module:function' or "
        "{'model': '<local model folder>'}"
    )
