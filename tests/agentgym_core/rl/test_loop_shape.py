"""The training loop stays readable top to bottom: issue 47's limits on `rl/trainer.py:_train`.

One loop runs on every rank (spawned, torchrun, Ray); ranks that do not drive get null objects, so
the loop itself tests the rank at most twice and fits in 140 lines. A change that grows it past
either limit belongs in a role, the driver or a helper, not in the loop.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agentgym_core.rl.trainer as trainer_module

MAX_LINES = 140
MAX_RANK_TESTS = 2
RANK_ATTRIBUTES = {"is_main", "rank", "local_rank"}  # which rank this is (a world-size check is the same on all)


def _train_node() -> ast.FunctionDef:
    tree = ast.parse(Path(trainer_module.__file__).read_text())
    found = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "_train"]
    assert len(found) == 1, "rl/trainer.py should define _train once"
    return found[0]


def _rank_tests(function: ast.FunctionDef) -> list[int]:
    """Lines where a branch or conditional expression decides on the rank (ctx.is_main, ctx.rank == 0, ...)."""
    lines = []
    for node in ast.walk(function):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            names = {n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)}
            if names & RANK_ATTRIBUTES:
                lines.append(node.lineno)
    return sorted(lines)


def test_the_loop_fits_in_140_lines():
    function = _train_node()
    length = function.end_lineno - function.lineno + 1
    assert length <= MAX_LINES, f"_train is {length} lines (limit {MAX_LINES}): move a phase into a helper or role"


def test_the_loop_tests_the_rank_at_most_twice():
    lines = _rank_tests(_train_node())
    assert len(lines) <= MAX_RANK_TESTS, f"_train tests the rank on lines {lines}: give non-driving ranks a null object"


def test_the_rank_test_counter_sees_a_rank_branch():
    source = "def _train(ctx):\n    if ctx.is_main:\n        pass\n    x = 1 if ctx.rank == 0 else 2\n"
    assert len(_rank_tests(ast.parse(source).body[0])) == 2
