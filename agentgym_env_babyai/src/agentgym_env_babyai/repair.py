"""A repair for a minigrid 3.2 verifier bug that makes ordered Debug missions unsolvable.

``BeforeInstr.verify`` (and ``AfterInstr.verify``), on the action that completes the first
sub-instruction, immediately re-verifies the *second* sub-instruction with the same action. In the
strict (Debug) levels the second instruction is a strict ``OpenInstr``, which reports "failure"
whenever the toggled door in front is not its own door, and the door in front is the first
instruction's door, just opened. So "open the red door, then open the yellow door" fails the
moment the red door opens: in BabyAI-OpenDoorsOrderN4Debug two thirds of the tasks (the ordered
ones) cannot be solved by anyone, the minigrid bot included (measured: 30 of 40 seeds fail).

The repair wraps the two sub-instructions of the episode's instruction object (never minigrid's
classes): a "failure" of the second one on the very step the first one succeeded is read as
"continue". Every other verdict is minigrid's own.
"""

from __future__ import annotations

from typing import Any

from minigrid.envs.babyai.core.verifier import AfterInstr, BeforeInstr
from minigrid.minigrid_env import MiniGridEnv

__all__ = ["repair_strict_order"]


def repair_strict_order(game: MiniGridEnv) -> bool:
    """Patch the current episode's instructions in place; returns whether anything was patched."""
    instrs: Any = getattr(game, "instrs", None)
    if isinstance(instrs, BeforeInstr):
        first, second = instrs.instr_a, instrs.instr_b
    elif isinstance(instrs, AfterInstr):
        first, second = instrs.instr_b, instrs.instr_a
    else:
        return False
    if not getattr(second, "strict", False):
        return False

    completed_at: list[int] = []  # step_count at which `first` succeeded
    first_verify, second_verify = first.verify, second.verify

    def verify_first(action: int) -> str:
        status = first_verify(action)
        if status == "success":
            completed_at.append(game.step_count)
        return status

    def verify_second(action: int) -> str:
        status = second_verify(action)
        if status == "failure" and completed_at and completed_at[-1] == game.step_count:
            return "continue"  # the action belonged to the first instruction
        return status

    first.verify = verify_first
    second.verify = verify_second
    return True
