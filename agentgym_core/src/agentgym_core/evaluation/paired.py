"""Paired comparison of two evaluations of the same tasks: did training change success?

Two policies evaluated greedily on the same n tasks give, per task, success 0/1 before and after.
The difference of success rates is the mean of the per-task differences d_i in {-1, 0, 1}; pairing
removes the between-task variance (task difficulty), so the interval is much tighter than one built
from two independent proportions. The interval is the usual t interval on the mean of d:

    mean(d) +- t_{0.975, n-1} * sd(d) / sqrt(n)

It excludes 0 when the change is unlikely to be noise in which tasks were drawn. With sd(d) = 0
(no task changed, or all changed the same way) the interval is the point itself.

The t interval leans on a normal approximation that is shaky when few tasks flip, so the result also
carries McNemar's exact test: under no change each of the tasks that flipped is equally likely to
have flipped either way, a binomial with p = 1/2 on the gained and lost counts.
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


def paired_difference(before: Mapping[str, int | bool], after: Mapping[str, int | bool]) -> dict[str, Any]:
    """Success after minus before over the tasks both evaluated (keys: task names, values: 0/1).

    Returns ``n_tasks``, ``before``, ``after`` (success rates), ``diff`` and ``ci95`` ([low, high]),
    ``gained``/``lost`` (tasks that flipped to success / to failure), ``interval`` (how ``ci95`` was
    computed) and ``mcnemar_p``.
    """
    tasks = sorted(set(before) & set(after))
    if len(tasks) < 2:
        raise ValueError(f"a paired interval needs at least 2 tasks evaluated by both; got {len(tasks)}")
    d = [int(bool(after[t])) - int(bool(before[t])) for t in tasks]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    gained, lost = sum(1 for x in d if x > 0), sum(1 for x in d if x < 0)
    return {
        "n_tasks": n,
        "before": sum(int(bool(before[t])) for t in tasks) / n,
        "after": sum(int(bool(after[t])) for t in tasks) / n,
        "diff": mean,
        "ci95": [mean - half, mean + half],
        "gained": gained,
        "lost": lost,
        "interval": INTERVAL,
        "mcnemar_p": mcnemar_exact_p(gained, lost),
    }
