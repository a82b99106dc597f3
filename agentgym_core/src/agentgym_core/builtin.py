"""Builtin plugin of the core: registered through the same door as third-party plugins.

It provides the round schedulers (``fixed``, ``scaling_inter_stepwise``, ``adaptive``); see
:mod:`agentgym_core.schedulers`.
"""

from __future__ import annotations

from agentgym_core.hookspecs import Register, hookimpl
from agentgym_core.schedulers import make_adaptive, make_fixed, make_stepwise


@hookimpl
def agentgym_register_round_schedulers(register: Register) -> None:
    register("fixed", make_fixed, summary="The same turn budget at every training step.")
    register("scaling_inter_stepwise", make_stepwise,
             summary="ScalingInter-RL: horizons grow in stages every steps_scaling_inter steps.")
    register("adaptive", make_adaptive,
             summary="Advance the horizon when rolling training success passes a threshold.")
