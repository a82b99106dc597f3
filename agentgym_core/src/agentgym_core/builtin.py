"""Builtin plugin of the core: registered through the same door as third-party plugins.

It provides the `fixed` round scheduler, the one a run uses when nothing else is configured.
"""

from __future__ import annotations

from agentgym_core.hookspecs import Register, hookimpl
from agentgym_core.schedulers import FixedRounds


@hookimpl
def agentgym_register_round_schedulers(register: Register) -> None:
    register("fixed", FixedRounds, summary="The same turn budget at every training step.")
