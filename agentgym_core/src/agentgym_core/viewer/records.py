"""One trajectory line -> what the viewer shows, whichever of the two on-disk formats it is in.

Two formats reach the viewer:

* the rollout log (``agentgym.trajectory/1``, :mod:`agentgym_core.rollout.logs`): evaluation's
  ``trajectories.jsonl`` and ``rollouts/step_<N>.jsonl``; turns carry text, action, observation,
  reward and timings; ``tokens`` only when the writer was asked to include them;
* the trainer's dump (``Trajectory.model_dump_json()``, ``trajectories/step_<N>.jsonl``): no format
  tag, token ids/mask/log-probs at the top level, turns with token spans and the env's ``info``.

:func:`summarize_record` is what the trajectory list needs (small, computed once per line while
indexing); :func:`detail_record` is the full turn-by-turn view, built only when one is opened.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SPECIAL_TOKEN", "detail_record", "split_special_tokens", "split_thought", "summarize_record",
           "token_arrays"]

_ACTION = re.compile(r"\bAction\s*:", re.IGNORECASE)
_THOUGHT = re.compile(r"^\s*Thought\s*:\s*", re.IGNORECASE)
SPECIAL_TOKEN = re.compile(r"<\|[^<>|\s]{1,40}\|>|</?s>|<eos>|<bos>|<pad>|<(?:start|end)_of_turn>")
"""Special tokens as chat templates write them (``<|im_end|>``, ``<|eot_id|>``, ``</s>``, ``<end_of_turn>``).
The backends decode replies with them kept, so the text matches the tokens that were trained."""


def split_special_tokens(text: str) -> tuple[str, list[str]]:
    """``text`` without its special tokens, and those tokens in order (shown as tokens, not as prose)."""
    return SPECIAL_TOKEN.sub("", text).strip(), SPECIAL_TOKEN.findall(text)


def _turns(raw: dict[str, Any]) -> list[dict[str, Any]]:
    turns = raw.get("turns")
    return turns if isinstance(turns, list) else []


def _outcome(raw: dict[str, Any]) -> float:
    if isinstance(raw.get("outcome_reward"), (int, float)):
        return float(raw["outcome_reward"])
    return float(sum(t.get("reward", 0.0) or 0.0 for t in _turns(raw)))


def _sampled_tokens(raw: dict[str, Any]) -> int | None:
    mask = raw.get("mask")
    if isinstance(mask, dict) and isinstance(mask.get("sampled"), int):
        return mask["sampled"]
    if isinstance(raw.get("loss_mask"), list):
        return int(sum(raw["loss_mask"]))
    return None


def _wall_seconds(raw: dict[str, Any]) -> float | None:
    timing = raw.get("timing")
    if isinstance(timing, dict) and timing.get("wall_seconds") is not None:
        return float(timing["wall_seconds"])
    if raw.get("wall_seconds") is not None:
        return float(raw["wall_seconds"])
    return None


def summarize_record(raw: dict[str, Any]) -> dict[str, Any]:
    """The row of the trajectory list: identity, outcome, turns, tokens, wall time, last action."""
    turns = _turns(raw)
    num_turns = raw.get("num_turns")
    return {
        "env": raw.get("env") or "?",
        "task_id": raw.get("task_id"),
        "sample_index": raw.get("sample_index", 0),
        "category": raw.get("category"),
        "success": bool(raw.get("success", False)),
        "reward": round(_outcome(raw), 6),
        "turns": int(num_turns) if isinstance(num_turns, int) else len(turns),
        "failed": bool(raw.get("failed", False)),
        "invalid_actions": sum(turn.get("invalid_action") is True for turn in turns),
        "truncation_reason": raw.get("truncation_reason"),
        "sampled_tokens": _sampled_tokens(raw),
        "wall_seconds": _wall_seconds(raw),
        "last_action": (turns[-1].get("action") or "")[:80] if turns else "",
    }


def split_thought(text: str) -> tuple[str, str]:
    """``"Thought: ... Action: ..."`` -> (thought, action part).

    Without an ``Action:`` marker there is no way to tell thought from action, so the thought is
    empty unless the reply opens with ``Thought:`` (the page then shows the whole reply).
    """
    match = _ACTION.search(text or "")
    if match is None:
        return (_THOUGHT.sub("", text).strip() if _THOUGHT.match(text or "") else ""), ""
    return _THOUGHT.sub("", text[: match.start()]).strip(), text[match.end():].strip()


def token_arrays(raw: dict[str, Any]) -> dict[str, Any] | None:
    """``{token_ids, loss_mask, logprobs, advantages?, text?}`` from either format, or None if absent."""
    source = raw.get("tokens") if isinstance(raw.get("tokens"), dict) else raw
    ids = source.get("token_ids")
    if not isinstance(ids, list) or not ids:
        return None
    out: dict[str, Any] = {
        "token_ids": ids,
        "loss_mask": source.get("loss_mask") or [],
        "logprobs": source.get("logprobs") or [],
    }
    # Fields a trainer may add later; read them wherever they sit.
    for key in ("advantages", "text"):
        value = source.get(key, raw.get(key))
        if isinstance(value, list) and len(value) == len(ids):
            out[key] = value
    return out


def detail_record(raw: dict[str, Any]) -> dict[str, Any]:
    """The turn-by-turn view of one trajectory (tokens are served separately, see the app)."""
    turns = _turns(raw)
    messages = raw.get("messages") or []
    prompt = [m for m in messages if m.get("role") == "system"]
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    if first_user is not None:
        prompt.append(first_user)
    timing = raw.get("timing") if isinstance(raw.get("timing"), dict) else {
        "gen_seconds": raw.get("gen_seconds"), "env_seconds": raw.get("env_seconds"),
        "wall_seconds": raw.get("wall_seconds"),
    }
    view_turns = []
    for position, turn in enumerate(turns):
        last = position == len(turns) - 1
        prose, special = split_special_tokens(turn.get("text") or "")
        thought, _ = split_thought(prose)
        action_span = turn.get("action_span")
        sampled = turn.get("sampled_tokens")
        if sampled is None and isinstance(action_span, dict):
            sampled = action_span.get("end", 0) - action_span.get("start", 0)
        view_turns.append({
            "index": turn.get("index", position),
            "text": turn.get("text") or "",
            "thought": thought,
            "special_tokens": special,
            "action": turn.get("action") or "",
            "observation": turn.get("observation"),
            "reward": turn.get("reward", 0.0),
            "success": turn.get("success"),
            "invalid_action": turn.get("invalid_action"),
            "finish_reason": turn.get("finish_reason"),
            "sampled_tokens": sampled,
            "gen_seconds": turn.get("gen_seconds"),
            "env_seconds": turn.get("env_seconds"),
            # Per-turn done flags: the trajectory's ending belongs to its last turn.
            "terminated": bool(raw.get("terminated")) and last,
            "truncated": bool(raw.get("truncated")) and last,
            "failed": bool(raw.get("failed")) and last,
            "info": _display_info(turn.get("info")),
            "has_screenshot": isinstance(turn.get("info"), dict) and bool(turn["info"].get("screenshot")),
            "grid": _grid(turn.get("info")),
        })
    tokens = token_arrays(raw)
    return {
        **summarize_record(raw),
        "seed": raw.get("seed"),
        "step": raw.get("step"),
        "format": "log" if raw.get("format") else "trajectory",
        "terminated": bool(raw.get("terminated")),
        "truncated": bool(raw.get("truncated")),
        "failure_reason": raw.get("failure_reason"),
        "max_turns": raw.get("max_turns"),
        "timing": timing,
        "prompt": prompt,
        # The JSON schemas the chat template rendered the prompt with (native tool calls), when there were any.
        "tools": raw["tools"] if isinstance(raw.get("tools"), list) and raw["tools"] else None,
        "messages": len(messages),
        "turns_detail": view_turns,
        "tokens_available": tokens is not None,
        "tokens_count": len(tokens["token_ids"]) if tokens else (raw.get("mask") or {}).get("total"),
    }


def _grid(info: Any) -> list[str] | None:
    """A BabyAI-style text map (``info['grid']``: rows of 2-character cells), drawn by the page."""
    grid = info.get("grid") if isinstance(info, dict) else None
    if isinstance(grid, list) and grid and all(isinstance(row, str) for row in grid):
        return grid
    return None


def _display_info(info: Any) -> dict[str, Any] | None:
    """The env's step info without bulky values (a base64 screenshot is served on its own route)."""
    if not isinstance(info, dict) or not info:
        return None
    shown = {}
    for key, value in info.items():
        if key in ("screenshot", "grid"):  # served or drawn on their own
            continue
        text = value if isinstance(value, (int, float, bool)) or value is None else str(value)
        shown[key] = text[:300] + "…" if isinstance(text, str) and len(text) > 300 else text
    return shown or None
