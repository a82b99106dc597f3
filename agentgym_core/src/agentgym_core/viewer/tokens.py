"""The token view: each token's text, loss mask, log-prob and advantage.

Token text comes from the run's own tokenizer when one is on disk (a checkpoint's ``model/``
folder, a ``model.path`` directory in ``config.yaml``, or the ``--model`` directory an
evaluation's ``results.json`` names), decoded one id at a time with the
``tokenizers`` library; without one the view shows ids.

Advantages: when the trajectory line carries per-token ``advantages`` they are shown as logged.
The trainer does not log them today, so for training steps the view derives the GRPO-style
outcome advantage instead -- the trajectory's outcome reward minus the mean outcome of its group
(same step, environment and task) -- spread over its sampled tokens, and says so. Its *sign* is
what every group-baseline estimator (GRPO, RLOO, Dr. GRPO) trains with; token-level estimators
(GAE, REINFORCE++) can differ per token, which only logged advantages can show.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from agentgym_core.viewer.records import token_arrays

__all__ = ["TokenDecoder", "derived_advantages", "find_tokenizer_file", "token_view"]


def find_tokenizer_file(run_dir: Path) -> Path | None:
    """The ``tokenizer.json`` this run's tokens were made with, if one is on disk."""
    candidates = [run_dir / "tokenizer.json", run_dir / "tokenizer" / "tokenizer.json"]
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir():
        done = sorted((p for p in checkpoints.glob("step_*") if (p / "DONE").exists()), reverse=True)
        candidates += [p / "model" / "tokenizer.json" for p in done]
    model_path = _configured_model(run_dir)
    if model_path:
        candidates.append(Path(model_path).expanduser() / "tokenizer.json")
    return next((p for p in candidates if p.is_file()), None)


def _configured_model(run_dir: Path) -> str | None:
    """``model.path`` of a training's ``config.yaml``, or ``config.model`` of an evaluation's ``results.json``."""
    try:
        if (run_dir / "config.yaml").is_file():
            model = (yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}).get("model", {})
            path = model.get("path")
        else:
            path = json.loads((run_dir / "results.json").read_text(encoding="utf-8")).get("config", {}).get("model")
    except (OSError, yaml.YAMLError, json.JSONDecodeError, AttributeError):
        return None
    return path if isinstance(path, str) and path else None


class TokenDecoder:
    """Decodes ids one at a time with a run's tokenizer (loaded once, on first use)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._tokenizer: Any = None
        self._source: Path | None = None
        self.missing: str | None = None  # why ids are shown instead of text, once a load was tried
        self._loaded = False
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if not self._loaded:
                self._loaded = True
                path = find_tokenizer_file(self.run_dir)
                if path is None:
                    self.missing = "no tokenizer.json found for this run (run directory, checkpoints, model path)"
                    return None
                try:
                    from tokenizers import Tokenizer
                except ImportError:
                    self.missing = (f"{path} is there, but the `tokenizers` library is not installed in the viewer's "
                                    "Python (pip install tokenizers)")
                    return None
                try:
                    self._tokenizer, self._source = Tokenizer.from_file(str(path)), path
                except Exception as exc:  # noqa: BLE001 -- a tokenizer we cannot read just means ids are shown
                    self.missing = f"{path} could not be read ({type(exc).__name__}: {exc})"
            return self._tokenizer

    def decode(self, ids: list[int]) -> tuple[list[str] | None, str | None]:
        """(one string per id, where the tokenizer came from) or (None, None) without a tokenizer."""
        tokenizer = self._load()
        if tokenizer is None:
            return None, None
        pieces = tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
        return pieces, str(self._source.relative_to(self.run_dir) if self._source.is_relative_to(self.run_dir)
                           else self._source)


def derived_advantages(summaries: list[dict[str, Any]]) -> dict[int, float]:
    """Trajectory index -> outcome reward minus its (env, task) group's mean; groups of one are left out."""
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for row in summaries:
        groups[(row.get("env"), row.get("task_id"))].append(row)
    out = {}
    for rows in groups.values():
        if len(rows) < 2:
            continue
        mean = sum(r["reward"] for r in rows) / len(rows)
        for r in rows:
            out[r["i"]] = r["reward"] - mean
    return out


def token_view(raw: dict[str, Any], *, decoder: TokenDecoder, group_advantage: float | None,
               training: bool, not_trained: str | None = None) -> dict[str, Any]:
    """The token view payload of one trajectory record (see the module docstring).

    ``not_trained`` says why the sampled tokens (mask 1) were not trained on, when they were not
    (an evaluation, a skipped update, a broken trajectory); the page then labels them so.
    """
    arrays = token_arrays(raw)
    if arrays is None:
        return {"available": False,
                "reason": "this log has no tokens (rollout logs include them only with include_tokens=True)"}
    ids = arrays["token_ids"]
    mask = list(arrays["loss_mask"]) or [0] * len(ids)
    texts, source = (arrays["text"], "logged") if "text" in arrays else decoder.decode(ids)
    if "advantages" in arrays:
        advantages, adv_source = arrays["advantages"], "logged"
    elif training and group_advantage is not None:
        advantages = [group_advantage if m else 0.0 for m in mask]
        adv_source = "derived"
    else:
        advantages, adv_source = None, None
    turns = []
    for turn in raw.get("turns") or []:
        span = turn.get("action_span")
        if isinstance(span, dict):
            turns.append({"index": turn.get("index"), "start": span.get("start"), "end": span.get("end"),
                          "reward_index": turn.get("reward_index"), "reward": turn.get("reward", 0.0)})
    return {
        "available": True,
        "token_ids": ids,
        "loss_mask": mask,
        "logprobs": arrays["logprobs"] or None,
        "text": texts,
        "text_source": source,
        "text_missing": None if texts is not None else decoder.missing,
        "trained": not_trained is None,
        "not_trained": not_trained,
        "advantages": advantages,
        "advantage_source": adv_source,
        "turn_spans": turns,
    }
