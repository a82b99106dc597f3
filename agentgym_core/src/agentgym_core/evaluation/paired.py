"""Paired comparison of two evaluations of the same tasks: did training change success?

Two policies evaluated greedily on the same n tasks give, per task, success 0/1 before and after; sampled K
times a task, its success rate in [0, 1] (Avg@K). The difference of success rates is the mean of the
per-task differences d_i (in {-1, 0, 1} for greedy flags, in [-1, 1] for rates); pairing
removes the between-task variance (task difficulty), so the interval is much tighter than one built
from two independent proportions. The interval is the usual t interval on the mean of d:

    mean(d) +- t_{0.975, n-1} * sd(d) / sqrt(n)

It excludes 0 when the change is unlikely to be noise in which tasks were drawn. With sd(d) = 0
(no task changed, or all changed the same way) the interval is the point itself.

The t interval leans on a normal approximation that is shaky when few tasks flip, so the result also
carries McNemar's exact test: under no change each of the tasks that flipped is equally likely to
have flipped either way, a binomial with p = 1/2 on the gained and lost counts. It is a test of paired
binary outcomes, so rates (any value strictly between 0 and 1) get none: ``mcnemar_p`` is None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["INTERVAL", "mcnemar_exact_p", "paired_difference", "t_quantile_975"]

INTERVAL = "paired t interval over tasks"  # how ``ci95`` is computed, named in every result

# Two-sided 95% Student t quantiles for small degrees of freedom; the normal 1.96 beyond 120.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 80: 1.990, 100: 1.984,
         120: 1.980}


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: the tabulated value at the largest tabulated df <= ``df`` (conservative), 1.96 past 120."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df > 120:
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]


def mcnemar_exact_p(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value of ``gained`` tasks flipped to success and ``lost`` to failure
    (1.0 when none flipped)."""
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_difference(before: Mapping[str, float | bool], after: Mapping[str, float | bool]) -> dict[str, Any]:
    """Success after minus before over the tasks both evaluated (keys: task names; values: success flags 0/1,
    or success rates in [0, 1] when a task was sampled several times).

    Returns ``n_tasks``, ``before``, ``after`` (success rates), ``diff`` and ``ci95`` ([low, high]),
    ``gained``/``lost`` (tasks whose success rose / fell: flipped to success / to failure for flags),
    ``interval`` (how ``ci95`` was computed) and ``mcnemar_p`` (None when any value is a rate).
    """
    tasks = sorted(set(before) & set(after))
    if len(tasks) < 2:
        raise ValueError(f"a paired interval needs at least 2 tasks evaluated by both; got {len(tasks)}")
    b, a = _rates(before, tasks, "before"), _rates(after, tasks, "after")
    d = [x - y for x, y in zip(a, b, strict=True)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    gained, lost = sum(1 for x in d if x > 0), sum(1 for x in d if x < 0)
    binary = all(v in (0.0, 1.0) for v in (*b, *a))
    return {
        "n_tasks": n,
        "before": sum(b) / n,
        "after": sum(a) / n,
        "diff": mean,
        "ci95": [mean - half, mean + half],
        "gained": gained,
        "lost": lost,
        "interval": INTERVAL,
        "mcnemar_p": mcnemar_exact_p(gained, lost) if binary else None,
    }


def _rates(values: Mapping[str, float | bool], tasks: list[str], which: str) -> list[float]:
    """``values`` of ``tasks`` as floats, refusing any outside [0, 1] (a score, not a success)."""
    out = [float(values[t]) for t in tasks]
    bad = [(t, v) for t, v in zip(tasks, out, strict=True) if not 0.0 <= v <= 1.0]
    if bad:
        raise ValueError(f"{which}: success must be a flag (0/1) or a rate in [0, 1]; task {bad[0][0]!r} has "
                         f"{bad[0][1]!r}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
    return out
