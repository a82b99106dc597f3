"""Settings of their own for estimator and scheduler plugins, typed and checked like the core's.

The recipe sections ``algorithm.advantage`` and ``algorithm.rounds_ctrl`` hold the options of the
estimator named by ``algorithm.estimator`` and of the scheduler named by ``algorithm.rounds_ctrl.type``.
A plugin declares its own options when it registers the object (``options=``): a pydantic class that
subclasses :class:`~agentgym_core.rl.estimator_api.AdvantageConfig` (estimators) or
:class:`~agentgym_core.schedulers.RoundsConfig` (schedulers) and adds typed fields with help text::

    class BaselineOptions(AdvantageConfig):
        baseline: float = Field(0.5, description="Subtracted from every return.")

    def estimate(batch, config: BaselineOptions) -> AdvantageOutput: ...

    @hookimpl
    def agentgym_register_advantage_estimators(register):
        register("baseline", estimate, options=BaselineOptions)

:func:`bind_plugin_options` looks both plugins up (an unknown name fails with "did you mean"),
checks the section against the plugin's model (an unknown key fails with "did you mean" and the
valid keys, as every other section does) and puts an instance of that model in the config, so the
plugin receives its own typed options, and the run's saved ``config.yaml`` keeps them. A plugin
that declares no options takes only the core's keys (an ``options_model`` attribute on the object, the
older way to declare them, is still read).
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

from agentgym_core.plugins import PluginError, PluginManager, get_plugin_manager
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import TrainConfig
from agentgym_core.rl.estimator_api import AdvantageConfig
from agentgym_core.schedulers import RoundsConfig, final_horizon

__all__ = ["bind_plugin_options", "final_horizon_of", "options_model_of"]


def options_model_of(declared: Any, base: type[BaseModel], *, what: str) -> type[BaseModel]:
    """The options class a plugin declared (``Registration.declared("options")``), or ``base`` when it declared none."""
    model = declared
    if model is None:
        return base
    if not (isinstance(model, type) and issubclass(model, base)):
        raise PluginError(f"{what} declares options={model!r}, which must be a subclass of "
                          f"{base.__module__}.{base.__name__}; subclass it and add your fields")
    return model


def _bind(section: BaseModel, model: type[BaseModel], where: str, what: str) -> BaseModel:
    data = section.model_dump(mode="json")  # the core's fields with their values, plus any extra keys
    fields = list(model.model_fields)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1, cutoff=0.5)
            hint = f" Did you mean '{where}.{close[0]}'?" if close else ""
            raise ConfigError(f"unknown config key '{where}.{key}'.{hint} Valid keys here (the {what} takes "
                              f"these): {', '.join(sorted(fields))}.")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join([where, *map(str, e['loc'])])}: {e['msg']}" for e in exc.errors()]
        raise ConfigError("invalid config: " + "; ".join(problems)) from None


def bind_plugin_options(config: TrainConfig, plugin_manager: PluginManager) -> TrainConfig:
    """A copy of ``config`` whose advantage and round-schedule sections are the named plugins' own options.

    Raises UnknownNameError when the estimator or scheduler is not installed and ConfigError when a
    section has a key its plugin does not take (or a bad value).
    """
    alg = config.algorithm
    estimator = plugin_manager.registration("advantage_estimator", alg.estimator).declared("options")
    scheduler = plugin_manager.registration("round_scheduler", alg.rounds_ctrl.type).declared("options")
    bound = config.model_copy(deep=True)
    what = f"estimator {alg.estimator!r}"
    bound.algorithm.advantage = _bind(  # type: ignore[assignment]
        alg.advantage, options_model_of(estimator, AdvantageConfig, what=what), "algorithm.advantage", what)
    what = f"round scheduler {alg.rounds_ctrl.type!r}"
    bound.algorithm.rounds_ctrl = _bind(  # type: ignore[assignment]
        alg.rounds_ctrl, options_model_of(scheduler, RoundsConfig, what=what), "algorithm.rounds_ctrl", what)
    return bound


def final_horizon_of(config: TrainConfig, plugin_manager: PluginManager | None = None) -> int:
    """The horizon ``config``'s held-out evaluations play, as its round scheduler gives it
    (:func:`agentgym_core.schedulers.final_horizon`), with the scheduler's own options bound."""
    pm = plugin_manager or get_plugin_manager()
    rounds = bind_plugin_options(config, pm).algorithm.rounds_ctrl
    return final_horizon(pm.get("round_scheduler", rounds.type)(rounds), config.trainer.steps)
