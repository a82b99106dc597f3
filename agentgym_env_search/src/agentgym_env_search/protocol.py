"""The Search-R1 text protocol: ``<search>q</search>``, ``<information>…</information>``, ``<answer>a</answer>``.

A model reply may reason first (``<think>…</think>``) and then issue one tag. The first
``<search>`` or ``<answer>`` tag of a reply is the action, as in Search-R1, whose generation
stops at the first closing tag; anything after it was never meant to be read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from agentgym_env_search.retrievers import Hit

__all__ = ["SearchAction", "format_information", "parse_search_action"]

_TAG = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class SearchAction:
    """A parsed action: ``kind`` is ``search``, ``answer`` or ``invalid``."""

    kind: str
    content: str

    def render(self) -> str:
        return f"<{self.kind}>{self.content}</{self.kind}>" if self.kind != "invalid" else self.content


def parse_search_action(text: str) -> SearchAction:
    """The first ``<search>``/``<answer>`` tag of ``text``; ``invalid`` when there is none or it is empty."""
    match = _TAG.search(text)
    if match is None:
        return SearchAction("invalid", text.strip())
    content = " ".join(match.group(2).split())
    if not content:
        return SearchAction("invalid", match.group(0))
    return SearchAction(match.group(1).lower(), content)


def format_information(hits: Sequence[Hit]) -> str:
    """Search-R1's observation: ``<information>Doc 1(Title: …) text\\nDoc 2(Title: …) …</information>``."""
    if not hits:
        return "<information>No passage matched the query. Try other keywords.</information>"
    lines = [f"Doc {number}(Title: {hit.title}) {hit.text}" for number, hit in enumerate(hits, 1)]
    return "<information>" + "\n".join(lines) + "</information>"
