"""check_env's default policy plays valid moves when an environment lists none.

Before, it sent only the deliberately invalid action to such an environment, so a game that ends on
the second invalid move (TextArena's rule) passed a check that had played no move at all.
"""

from __future__ import annotations

import pytest

from agentgym_core.env import Env, EpisodeEndedError, ResetResult, StepResult, TaskCatalog
from agentgym_core.testing import check_env


class Hanoi1(Env):
    """Move the one disk from A to C; two invalid moves lose. Lists no actions."""

    name = "hanoi1"
    max_episode_steps = 6

    def __init__(
        self, instruction: str = "Move the disk to tower C. Moves look like `[A C]` or `[A B]`."
    ) -> None:
        self._instruction = instruction
        self.where, self.errors, self.done = "A", 0, True

    @property
    def instruction(self) -> str:
        return self._instruction

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskCatalog(splits={"test": [0]})

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        self.where, self.errors, self.done = "A", 0, False
        return ResetResult(observation="The disk is on A.")

    def step(self, action: str) -> StepResult:
        if self.done:
            raise EpisodeEndedError("over")
        moves = {f"[{a} {b}]" for a in "ABC" for b in "ABC" if a != b}
        if action not in moves or action[1] != self.where:
            self.errors += 1
            self.done = self.errors >= 2
            return StepResult(
                observation="Invalid move.",
                reward=-1.0 if self.done else 0.0,
                terminated=self.done,
                success=False if self.done else None,
            )
        self.where = action[3]
        self.done = self.where == "C"
        return StepResult(
            observation=f"The disk is on {self.where}.",
            reward=float(self.done),
            terminated=self.done,
            success=True if self.done else None,
        )


def test_the_default_policy_plays_the_moves_the_instruction_names():
    report = check_env(Hanoi1)
    actions = [step[0] for step in report.episodes[0].steps]
    assert "[A C]" in actions  # a real move, not only the invalid one (which would lose on the 2nd)
    assert report.episodes[0].steps[-1][5] is True


def test_no_move_to_play_warns_and_says_to_pass_a_policy():
    with pytest.warns(UserWarning, match="exercised only invalid actions.*Pass policy="):
        check_env(lambda: Hanoi1(instruction="Move the disk to tower C."))
    # ... and with one it passes.
    report = check_env(
        lambda: Hanoi1(instruction="Move the disk to tower C."), policy=lambda env, i, obs: "[A C]"
    )
    assert report.episodes[0].steps[-1][5] is True


def test_suggested_actions_reads_the_usual_spellings():
    from agentgym_core.testing.env_check import suggested_actions

    text = (
        "Reply `Action: guess N`, `Action: go <dir>`, or press [Up]; e.g. <answer> Paris </answer>, \\boxed{A C}.\n"
        "- get <count> <item>: take raw materials, e.g. get 1 oak logs"
    )
    assert suggested_actions(text) == [
        "guess 1",
        "[Up]",
        "<answer> Paris </answer>",
        "\\boxed{A C}",
        "get 1 oak logs",
    ]
