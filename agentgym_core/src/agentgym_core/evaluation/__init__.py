"""The evaluation room: roll a model out on a split and report success and score (``agentgym eval``),
and compare two evaluations of the same tasks pairwise.

``held_out`` is the one evaluator (``agentgym eval`` and the trainer both play through it); ``run`` holds
``agentgym eval``'s :func:`evaluate` and its config (run directory, log, resume); ``results`` the results
shape both report; ``panel`` the fixed evaluation panels; ``paired`` the paired difference of two
evaluations' success rates with its interval and McNemar's exact test; ``run_summary`` the end of
an RL run (the paired change, the invalid-action rates, the updates that ran, warnings). Names load on first use.
"""

from agentgym_core.plugins import lazy_exports

__all__ = [
    "EvalConfig",
    "EvalInterrupted",
    "EvalResults",
    "GroupMetrics",
    "evaluate",
    "mcnemar_exact_p",
    "paired_difference",
    "summarize",
]

lazy_exports(__name__, {
    "EvalConfig": "agentgym_core.evaluation.run",
    "EvalInterrupted": "agentgym_core.evaluation.run",
    "EvalResults": "agentgym_core.evaluation.results",
    "GroupMetrics": "agentgym_core.evaluation.results",
    "evaluate": "agentgym_core.evaluation.run",
    "mcnemar_exact_p": "agentgym_core.evaluation.paired",
    "paired_difference": "agentgym_core.evaluation.paired",
    "summarize": "agentgym_core.evaluation.results",
})
