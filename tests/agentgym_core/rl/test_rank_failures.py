"""Ranks spawned on this machine that fail at start-up are reported once, in one line, with the exit code."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from failing_ranks import die_on_rank_one, fail_on_rank_one  # noqa: E402

from agentgym_core.rl.distributed import RankFailedError, spawn  # noqa: E402


def test_a_rank_that_raises_is_one_line_with_its_exit_code_and_error():
    with pytest.raises(RankFailedError) as failure:
        spawn(fail_on_rank_one, 2)
    message = str(failure.value)
    assert len(message.splitlines()) == 1
    assert message.startswith("learner rank 1 of 2 (pid ") and "exited with code 1" in message
    assert message.endswith("FileNotFoundError: cannot find model '/models/Qwen2.5-7B-Instruct'")


def test_a_rank_that_dies_says_its_exit_code():
    with pytest.raises(RankFailedError, match=r"^learner rank 1 of 2 \(pid \d+\) exited with code 3 before finishing$"):
        spawn(die_on_rank_one, 2)
