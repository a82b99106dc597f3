"""How a command ends on a setup error: one line on stderr, said once however many ranks meet it."""

from __future__ import annotations

import os
import sys

from agentgym_core.env import EnvError
from agentgym_core.plugins import PluginError

# Bad names, options, files or an unreachable server: errors whose message says the fix.
SETUP_ERRORS: tuple[type[BaseException], ...] = (PluginError, ValueError, FileNotFoundError, EnvError)


def under_torchrun() -> bool:
    """Whether torchrun started this process (it sets TORCHELASTIC_RUN_ID in every rank it starts)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def print_setup_error(exc: BaseException | str) -> None:
    """``agentgym: error: MESSAGE`` on one line of stderr. Under torchrun every rank runs the command on the
    same recipe and meets the same refusal: rank 0 alone says it (the others still exit non-zero)."""
    if under_torchrun() and os.environ.get("RANK", "0") != "0":
        return
    print(f"agentgym: error: {' '.join(str(exc).split())}", file=sys.stderr)
