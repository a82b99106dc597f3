"""How a command ends on a setup error: one line on stderr, said once however many ranks meet it."""

from __future__ import annotations

import os
import sys
import time

from agentgym_core.env import EnvError
from agentgym_core.plugins import PluginError

# Bad names, options, files or an unreachable server: errors whose message says the fix.
SETUP_ERRORS: tuple[type[BaseException], ...] = (PluginError, ValueError, FileNotFoundError, EnvError)


def under_torchrun() -> bool:
    """Whether torchrun started this process (it sets TORCHELASTIC_RUN_ID in every rank it starts)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


RANK_ZERO_GRACE_S = 60.0  # how long another rank leaves rank 0 to say a refusal first


def report_setup_error(exc: BaseException | str) -> None:
    """``agentgym: error: MESSAGE`` on one line of stderr, said once under torchrun.

    There every rank runs the command on the same recipe and meets the same refusal. torchrun stops the
    other ranks as soon as one exits, so a rank other than 0 waits before it speaks: rank 0 says the
    error and exits, and torchrun ends the waiting rank. A rank whose error rank 0 did not meet still
    says it, with its rank, after RANK_ZERO_GRACE_S."""
    message = " ".join(str(exc).split())
    rank = os.environ.get("RANK", "0")
    if under_torchrun() and rank != "0":
        time.sleep(RANK_ZERO_GRACE_S)
        message = f"(rank {rank}) {message}"
    print(f"agentgym: error: {message}", file=sys.stderr)
