"""Paired comparison of two evaluations of the same tasks: did training change success?

Two policies evaluated greedily on the same n tasks give, per task, success 0/1 before and after.
The difference of success rates is the mean of the per-task differences d_i in {-1, 0, 1}; pairing
removes the between-task variance (task difficulty), so the interval is much tighter than one built
from two independent proportions. The interval is the usual t interval on the mean of d:

    mean(d) +- t_{0.975, n-1} * sd(d) / sqrt(n)

It excludes 0 when the change is unlikely to be noise in which tasks were drawn. With sd(d) = 0
(no task changed, or all changed the same way) the interval is the point itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["paired_difference", "t_quantile_975"]

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


def paired_difference(before: Mapping[str, int | bool], after: Mapping[str, int | bool]) -> dict[str, float]:
    """Success after minus before over the tasks both evaluated (keys: task names, values: 0/1).

    Returns ``n_tasks``, ``before``, ``after`` (success rates), ``diff`` and ``ci95`` ([low, high]),
    ``gained``/``lost`` (tasks that flipped to success / to failure).
    """
    tasks = sorted(set(before) & set(after))
    if len(tasks) < 2:
        raise ValueError(f"a paired interval needs at least 2 tasks evaluated by both; got {len(tasks)}")
    d = [int(bool(after[t])) - int(bool(before[t])) for t in tasks]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return {
        "n_tasks": n,
        "before": sum(int(bool(before[t])) for t in tasks) / n,
        "after": sum(int(bool(after[t])) for t in tasks) / n,
        "diff": mean,
        "ci95": [mean - half, mean + half],
        "gained": sum(1 for x in d if x > 0),
        "lost": sum(1 for x in d if x < 0),
    }
