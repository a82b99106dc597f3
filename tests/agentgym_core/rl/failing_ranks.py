"""What spawned ranks run in test_rank_failures.py (a module of its own: spawned processes import it)."""

from __future__ import annotations

import os
import sys


def fail_on_rank_one() -> None:
    """Rank 1 fails as a rank does when this machine lacks the model; rank 0 finishes."""
    if os.environ["RANK"] == "1":
        raise FileNotFoundError("cannot find model '/models/Qwen2.5-7B-Instruct'")


def die_on_rank_one() -> None:
    """Rank 1 exits without a Python error (as a rank the OOM killer ends)."""
    if os.environ["RANK"] == "1":
        sys.stdout.flush()
        os._exit(3)
