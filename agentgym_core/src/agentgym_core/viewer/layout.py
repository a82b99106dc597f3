"""Which chart a metric goes in, and the run config as flat ``dotted.key -> value`` rows.

Charts are derived from the keys a run's ``metrics.jsonl`` actually has, so a metric a trainer or
plugin adds shows up without touching the page. Each key falls in one section, by its name:

==============  ==============================================================================
``headline``    first: what a reader opens the page for -- ``success``, ``reward`` and every loss
                (a key named ``loss`` or ``*_loss``), whatever else the run logs
``quiet``       last, folded: every other key whose values are all 0 (even at one point) or never
                changed (at least two points, all equal, train and eval lines together), e.g.
                counters of a feature that is off, failures that did not happen
``<env>``       keys written ``<env>/<name>`` (per-environment breakdowns), one section per env
``loss``        losses and the quantities the policy update is judged by (KL, clip fraction,
                entropy, advantages, log-prob gap, the sampler-learner ratios)
``optimizer``   learning rate, gradient norm, optimizer steps, update size
``timing``      wall times, throughputs and peak memory
``rollout``     everything else: success, reward, turns, horizon, trajectory and token counts
``eval``        keys only evaluation lines have (evaluation values of keys that training also
                logs are drawn dashed on the training chart of that key)
==============  ==============================================================================
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SECTION_ORDER", "chart_sections", "flatten_config", "metric_section", "quiet_keys"]

# The update's health (entropy, advantages, the sampler-learner gap) before the rollout's counts.
SECTION_ORDER = ("headline", "loss", "rollout", "optimizer", "timing", "eval")
"""Sections in page order; per-environment sections come after ``eval``, by name, then ``quiet``."""

QUIET = "quiet"
"""The folded section of charts with nothing to show: all zeros, or values that never changed."""

_HEADLINE = re.compile(r"^(success|reward|loss)$|_loss$")

# Within a section these come first, in this order; the rest follow alphabetically.
_FIRST = ("success", "invalid_action_rate", "reward", "turns", "horizon", "pg_loss", "kl_loss", "kl", "clip_frac", "entropy", "lr",
          "grad_norm", "time_step")
_LOSS = re.compile(r"loss|(^|_)kl($|_)|clip|entropy|advantage|logprob|value|^sampler_")
_OPTIMIZER = re.compile(r"^(lr|learning_rate)$|grad|optimizer|^update_tokens$|param_norm|weight_norm")
_TIMING = re.compile(r"^time_|_seconds$|_s$|_per_s$|per_min$|throughput|^wall|^peak_")


def metric_section(key: str) -> str:
    """The section of a training metric key (see the module docstring)."""
    if _HEADLINE.search(key) and "/" not in key:
        return "headline"
    if "/" in key:
        return key.split("/", 1)[0]
    if _TIMING.search(key):
        return "timing"
    if _OPTIMIZER.search(key):
        return "optimizer"
    if _LOSS.search(key):
        return "loss"
    return "rollout"


def _order(keys: list[str]) -> list[str]:
    rank = {k: i for i, k in enumerate(_FIRST)}
    return sorted(keys, key=lambda k: (rank.get(k.rsplit("/", 1)[-1], len(rank)), k))


def quiet_keys(series: dict[str, dict[str, list[Any]]]) -> set[str]:
    """Keys of ``{"train": {key: values}, "eval": {...}}`` whose values are all 0, or at least two and all equal.

    A single non-zero point is news (the first step's loss); a single 0 is a counter of something
    that did not happen (re-runs, failures, staleness).
    """
    values: dict[str, list[Any]] = {}
    for kind in series.values():
        for key, column in kind.items():
            values.setdefault(key, []).extend(v for v in column if v is not None)
    return {k for k, vs in values.items()
            if k != "step" and vs and all(v == vs[0] for v in vs) and (len(vs) >= 2 or vs[0] == 0)}


def chart_sections(train_keys: list[str], eval_keys: list[str],
                   quiet: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """``[{"section", "keys"}]``: one chart per key, every numeric key but ``step`` in exactly one section.

    A key both kinds of line have is charted once, in its training section, with both series.
    Keys in ``quiet`` (see :func:`quiet_keys`) go to the last section, ``quiet``, which the page
    shows folded, except headline keys: a success stuck at 0 is the news.
    """
    train = {k for k in train_keys if k != "step"}
    evaluation = {k for k in eval_keys if k != "step"}
    sections: dict[str, list[str]] = {}
    for key in train:
        sections.setdefault(metric_section(key), []).append(key)
    only_eval = sorted(evaluation - train)
    for key in only_eval:
        # A per-env eval key joins its env's section; other eval-only keys (``tasks``) get "eval",
        # but an eval-only success, reward or loss is still a headline.
        section = metric_section(key) if _HEADLINE.search(key) and "/" not in key else \
            key.split("/", 1)[0] if "/" in key else "eval"
        sections.setdefault(section, []).append(key)
    unchanged: list[str] = []
    for name, keys in list(sections.items()):
        if name == "headline":
            continue
        unchanged += [k for k in keys if k in quiet]
        sections[name] = [k for k in keys if k not in quiet]
        if not sections[name]:
            del sections[name]
    named = [s for s in SECTION_ORDER if s in sections]
    envs = sorted(s for s in sections if s not in SECTION_ORDER)
    out = [{"section": s, "keys": _order(sections[s])} for s in named + envs]
    if unchanged:
        out.append({"section": QUIET, "keys": sorted(unchanged)})
    return out


def flatten_config(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 0.01}}`` -> ``{"optim.lr": 0.01}``; lists of mappings are indexed (``envs.0.name``)."""
    if isinstance(value, dict):
        if not value and prefix:
            return {prefix: {}}
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten_config(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and any(isinstance(item, dict) for item in value):
        out = {}
        for index, item in enumerate(value):
            out.update(flatten_config(item, f"{prefix}.{index}"))
        return out
    return {prefix: value}
