"""Constrained actions: a reply's action drawn only from the environment's available actions.

With ``rollout.constrain_actions`` (``SamplingParams.constrain_actions``) the reply's free text (its
``Thought:``) is sampled as usual; once the text read so far ends with the action marker (``Action:``),
only tokens that continue one of the actions the environment lists (``Env.available_actions()``) may be
sampled, and once an action is complete, only the end of the reply (or a longer listed action it begins).

With ``guarantee`` (``SamplingParams.guarantee_action``, what evaluations use) a reply also may not end before
it has written the marker, and once only enough of its token budget is left for the marker, the longest
listed action and the end, the marker is written for it (``"\nAction:"``). So every reply names an action the
environment accepts. (Without those two rules, 2.7% of a main job's greedy turns after RL were replies that
wrote ``Actions:`` or repeated their thought to the cap, bench/README.md.) Training rollouts leave them off:
a reply that never writes the marker is then refused, which is what teaches the policy to write it. With
them on in training, nothing did: the thoughts of two main-job runs decayed (a third of their replies ran 35
tokens or more before the marker, against 1% without the two rules) and each lost 4 points (bench/README.md).

The recorded log-probs stay those of the unconstrained softmax, which the learner recomputes: as with
top-p, the constraint shapes what is sampled (the behaviour policy), not the policy being trained.

This module is the tokenizer-level part shared by backends: :class:`ActionTrie` holds the token ids of
each action as it reads after the marker (``" " + action``), :class:`ActionConstraint` follows one reply.
A backend's decode loop asks ``allowed()`` before each token and calls ``feed()`` after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["ACTION_MARKER", "ActionConstraint", "ActionTrie", "action_trie"]

ACTION_MARKER = "Action:"
"""The text after which a reply names its action (the ReAct reply format the environments parse)."""

_TAIL_TOKENS = 8  # tokens decoded to look for the marker at the end of the text (it is a few tokens long)


@dataclass
class ActionTrie:
    """Token-id prefixes of a set of actions. ``complete``: an action ends here."""

    children: dict[int, ActionTrie] = field(default_factory=dict)
    complete: bool = False

    def insert(self, ids: Sequence[int]) -> None:
        node = self
        for token in ids:
            node = node.children.setdefault(int(token), ActionTrie())
        node.complete = True


def action_trie(actions: Iterable[str], encode: Callable[[str], list[int]], *, leading_space: bool = True) -> ActionTrie:
    """The trie of ``actions`` as they are tokenized after the marker: ``encode(" " + action)`` (the marker's
    usual space), or ``encode(action)`` after a marker whose last token carried the space."""
    root = ActionTrie()
    for action in actions:
        action = action.strip()
        if action:
            root.insert(encode(f" {action}" if leading_space else action))
    return root


class ActionConstraint:
    """One reply's constraint: free until the text ends with the marker, then the listed actions' tokens only.

    Args:
        actions: the environment's available actions for this turn.
        encode: text -> token ids, without special tokens (the backend's ``encode``).
        decode: token ids -> text (the backend's ``decode``).
        end_ids: the tokens that end a reply (end of turn / EOS).
        context: the last prompt tokens, so a prompt that already ends with the marker constrains the first token.
        max_tokens: the reply's token budget (None: unbounded, and the marker is never forced).
        guarantee: the reply may not end before the marker, which is forced when its budget runs low (above).
    """

    def __init__(self, actions: Sequence[str], encode: Callable[[str], list[int]],
                 decode: Callable[[Sequence[int]], str], end_ids: Iterable[int], *, context: Sequence[int] = (),
                 marker: str = ACTION_MARKER, max_tokens: int | None = None, guarantee: bool = True) -> None:
        if not actions:
            raise ValueError("ActionConstraint: no actions to choose from; pass the environment's available actions")
        self.actions = list(actions)
        self._encode, self._decode = encode, decode
        self.end_ids = sorted({int(t) for t in end_ids})
        if not self.end_ids:
            raise ValueError("ActionConstraint: no end-of-reply token ids; a complete action could not end the reply")
        self.marker = marker
        self._tail: list[int] = list(context)[-_TAIL_TOKENS:]
        self.node: ActionTrie | None = None  # None: free text; else the trie node the reply has reached
        self._listed = any(a.strip() for a in self.actions)  # only blank actions: nothing to constrain
        self._guarantee = guarantee and self._listed
        self._marker_ids = encode("\n" + marker)
        self._reserve = 0  # tokens kept for the marker, the longest action and the end: only the guarantee uses it
        if self._guarantee:
            longest = max(len(encode(f" {a.strip()}")) for a in self.actions if a.strip())
            self._reserve = len(self._marker_ids) + longest + 1
        self._left = max_tokens  # tokens the reply may still sample
        self._forced: list[int] = []  # marker tokens still to write for the reply
        self._enter()
        self._force_if_due()

    @property
    def forced(self) -> bool:
        """Whether the marker is being written for the reply (its budget is nearly spent)."""
        return bool(self._forced)

    @property
    def active(self) -> bool:
        """Whether the next token is constrained (the marker has been read)."""
        return self.node is not None

    def allowed(self) -> list[int] | None:
        """The token ids the next token may be (None: any but :meth:`banned`). After a complete action: the end
        ids too; while the marker is forced: its next token."""
        if self._forced:
            return self._forced[:1]
        if self.node is None:
            return None
        ids = list(self.node.children)
        if self.node.complete:
            ids.extend(t for t in self.end_ids if t not in self.node.children)
        return ids

    def banned(self) -> list[int]:
        """Token ids the next token may not be when :meth:`allowed` is None: the end of the reply, before the
        marker is written."""
        return self.end_ids if self.node is None and not self._forced and self._guarantee else []

    def feed(self, token: int) -> None:
        """Advance past the token just sampled."""
        if self._left is not None:
            self._left -= 1
        if self.node is not None:
            # A token outside the trie can only come from a caller that did not mask with allowed(): stop
            # constraining this reply rather than guess (its action is then whatever it wrote).
            self.node = self.node.children.get(int(token))
            return
        if self._forced:  # a caller that did not mask may have drawn another token: stop forcing then
            self._forced = self._forced[1:] if int(token) == self._forced[0] else []
        self._tail = [*self._tail, int(token)][-_TAIL_TOKENS:]
        self._enter()
        self._force_if_due()

    def _force_if_due(self) -> None:
        """Write the marker for a reply whose budget has only room left for it, an action and the end."""
        if (self.node is None and not self._forced and self._guarantee and self._left is not None
                and self._left <= self._reserve):
            self._forced = list(self._marker_ids)

    def _enter(self) -> None:
        """Start constraining if the text read so far ends with the marker (with or without its space)."""
        text = self._decode(self._tail) if self._tail else ""
        if text.endswith(self.marker) or text.endswith(self.marker + " "):
            trie = action_trie(self.actions, self._encode, leading_space=text.endswith(self.marker))
            self.node = trie if trie.children else None  # only blank actions listed: nothing to constrain to
