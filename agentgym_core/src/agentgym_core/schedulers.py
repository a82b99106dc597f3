"""Round schedulers: how many turns a trajectory may take at a given training step.

ScalingInter-RL (AgentGym-RL) grows the turn horizon in stages: short horizons first, to exploit
what the model can already do, longer ones later, to explore. Three schedulers ship with the core:

* ``fixed``: the same horizon at every step.
* ``scaling_inter_stepwise``: ``rounds=[6, 13, 20]`` and ``steps_scaling_inter=100`` give 6 turns
  for steps 0-99, 13 for 100-199, 20 from step 200 on. The horizon is a pure function of the
  step, so a run resumed at step k gets exactly the horizon an uninterrupted run had at step k
  (the anchor's resume is off by one stage).
* ``adaptive``: advance to the next horizon once the rolling training success over ``window``
  steps reaches ``threshold`` (and the stage has lasted ``min_steps_per_stage`` steps). It has
  state, saved in checkpoints via ``state_dict``.

A scheduler is made by a factory registered under its name: ``make_scheduler(config) ->
RoundScheduler`` with ``config`` a :class:`RoundsConfig`. Steps are 0-based. Held-out evaluations
play the run's final horizon, which :func:`final_horizon` asks of the scheduler.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AdaptiveRounds",
    "FixedRounds",
    "RoundScheduler",
    "RoundsConfig",
    "final_horizon",
    "StepwiseRounds",
    "make_adaptive",
    "make_fixed",
    "make_stepwise",
]


class RoundsConfig(BaseModel):
    """``algorithm.rounds_ctrl``: the turn-horizon schedule (keys as in AgentGym-RL)."""

    # Extra keys are kept until the named plugin is known; rl.plugin_options then checks them against
    # the options class the plugin declares (a subclass of this class), with "did you mean" for typos.
    model_config = ConfigDict(extra="allow")

    type: str = Field("fixed", description="Scheduler name: fixed, scaling_inter_stepwise, adaptive, or a plugin's.")
    rounds: int | list[int] = Field(
        20, description="Max turns per trajectory: one number (fixed) or the stages' horizons, e.g. [6, 13, 20]."
    )
    steps_scaling_inter: int = Field(
        100, ge=1, description="scaling_inter_stepwise: training steps per stage."
    )
    threshold: float = Field(
        0.6, ge=0.0, le=1.0, description="adaptive: rolling training success that moves to the next stage."
    )
    window: int = Field(5, ge=1, description="adaptive: number of recent steps in the rolling success.")
    min_steps_per_stage: int = Field(5, ge=1, description="adaptive: fewest steps spent in a stage.")

    @model_validator(mode="after")
    def _check_rounds(self) -> RoundsConfig:
        stages = self.stages
        if not stages or any(r < 1 for r in stages):
            raise ValueError(f"rounds must be positive turn counts, got {self.rounds!r}")
        return self

    @property
    def stages(self) -> list[int]:
        return list(self.rounds) if isinstance(self.rounds, list) else [self.rounds]


@runtime_checkable
class RoundScheduler(Protocol):
    """The turn horizon per training step, plus whatever state must survive a resume.

    A scheduler may also define ``max_horizon() -> int``, the longest horizon it can give: held-out
    evaluations play it (:func:`final_horizon`). Without it, the longest ``horizon(step)`` over the run's
    steps is used, which suits a scheduler whose horizon depends on the step alone.
    """

    def horizon(self, step: int) -> int:
        """Maximum number of agent turns per trajectory at training step ``step`` (0-based)."""
        ...

    def update(self, step: int, metrics: dict[str, float]) -> None:
        """Called after step ``step`` with its training metrics (``success`` among them)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """State to checkpoint (empty for stateless schedulers)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        ...


class _Stateless:
    def update(self, step: int, metrics: dict[str, float]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


class FixedRounds(_Stateless):
    """The same horizon at every step (the anchor's ``rounds_ctrl.type=fixed``)."""

    def __init__(self, rounds: int = 20) -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        self.rounds = rounds

    def horizon(self, step: int) -> int:
        return self.rounds

    def max_horizon(self) -> int:
        return self.rounds


class StepwiseRounds(_Stateless):
    """ScalingInter-RL: ``stages[min(step // steps_per_stage, last)]``."""

    def __init__(self, stages: list[int], steps_per_stage: int) -> None:
        if not stages or steps_per_stage < 1:
            raise ValueError("scaling_inter_stepwise needs a non-empty list of rounds and steps_scaling_inter >= 1")
        self.stages, self.steps_per_stage = list(stages), steps_per_stage

    def horizon(self, step: int) -> int:
        return self.stages[min(step // self.steps_per_stage, len(self.stages) - 1)]

    def max_horizon(self) -> int:
        return max(self.stages)


class AdaptiveRounds:
    """Move to the next horizon once rolling training success reaches ``threshold``."""

    def __init__(self, stages: list[int], threshold: float, window: int, min_steps_per_stage: int) -> None:
        self.stages, self.threshold = list(stages), threshold
        self.window, self.min_steps = window, min_steps_per_stage
        self.stage, self.stage_start = 0, 0
        self.recent: deque[float] = deque(maxlen=window)
        self.transitions: list[int] = []  # steps at which a new stage began

    def horizon(self, step: int) -> int:
        return self.stages[self.stage]

    def max_horizon(self) -> int:
        return max(self.stages)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        if "success" in metrics:
            self.recent.append(float(metrics["success"]))
        ready = (
            self.stage < len(self.stages) - 1
            and step + 1 - self.stage_start >= self.min_steps
            and len(self.recent) == self.window
            and sum(self.recent) / self.window >= self.threshold
        )
        if ready:
            self.stage, self.stage_start = self.stage + 1, step + 1
            self.recent.clear()  # the new horizon's success must be earned anew
            self.transitions.append(step + 1)

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "stage_start": self.stage_start, "recent": list(self.recent),
                "transitions": list(self.transitions)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stage, self.stage_start = int(state["stage"]), int(state["stage_start"])
        self.recent = deque(state["recent"], maxlen=self.window)
        self.transitions = list(state.get("transitions", []))


def final_horizon(scheduler: RoundScheduler, steps: int) -> int:
    """The horizon a run's held-out evaluations play: the scheduler's ``max_horizon()`` when it has one, else
    the longest ``horizon(step)`` over the run's ``steps`` training steps."""
    own = getattr(scheduler, "max_horizon", None)
    horizon = int(own()) if callable(own) else max(scheduler.horizon(step) for step in range(max(steps, 1)))
    if horizon < 1:
        raise ValueError(f"round scheduler {type(scheduler).__name__} gives a final horizon of {horizon}; "
                         "it must be at least 1 turn")
    return horizon


def make_fixed(config: RoundsConfig) -> FixedRounds:
    """``fixed``: the last entry of ``rounds`` when a list is given (the longest horizon)."""
    return FixedRounds(config.stages[-1])


def make_stepwise(config: RoundsConfig) -> StepwiseRounds:
    """``scaling_inter_stepwise``."""
    return StepwiseRounds(config.stages, config.steps_scaling_inter)


def make_adaptive(config: RoundsConfig) -> AdaptiveRounds:
    """``adaptive``."""
    return AdaptiveRounds(config.stages, config.threshold, config.window, config.min_steps_per_stage)


