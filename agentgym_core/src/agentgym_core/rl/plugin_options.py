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
that declares no options takes only the core's keys.

The rollout backend is bound the same way: ``rollout.backend_options`` is checked against the options
class the backend declares (``register(name, factory, options=MyBackendConfig)``), with ``model`` filled
from ``model.path`` as the trainer fills it (and ``lora`` from ``model.lora`` when the class has that field:
:func:`backend_factory_options`), after the class's optional ``missing_requirement(options)`` (a classmethod)
has had its say about what this machine lacks. Declarations decide the rest: an
estimator that declares ``critic=True`` needs ``algorithm.critic``, one that declares ``min_group_size``
needs that many samples per task, and what the backend's ``capabilities`` say sets the defaults that
depend on it (the off-policy correction). All of this happens when the recipe loads, before any work.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

from agentgym_core.plugins import PluginError, PluginManager, Registration, get_plugin_manager
from agentgym_core.recipes import ConfigError
from agentgym_core.rl.config import TrainConfig, check_group_size
from agentgym_core.rl.estimator_api import AdvantageConfig
from agentgym_core.rollout.backend import BackendCapabilities, capabilities_of
from agentgym_core.schedulers import RoundsConfig, final_horizon

__all__ = ["backend_capabilities", "backend_factory_options", "bind_plugin_options", "check_backend_options",
           "final_horizon_of", "options_model_of"]


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


def backend_factory_options(config: TrainConfig, options_model: Any) -> dict[str, Any]:
    """The options the rollout backend's factory receives: ``rollout.backend_options`` with ``model`` filled from
    ``model.path`` (unless the recipe names another), and, when the backend's options class has a ``lora`` field,
    ``lora`` set to ``model.lora``'s shape (r, alpha, dropout, target_modules; None when LoRA is off): a backend
    with its own copy of the base model must know the adapters' shape before the first sync."""
    options = {"model": config.model.path, **config.rollout.backend_options}
    fields = getattr(options_model, "model_fields", None) or {}
    if "lora" in fields:
        lora = config.model.lora
        options["lora"] = lora.model_dump(mode="json", exclude={"enabled"}) if lora.enabled else None
    return options


def check_backend_options(config: TrainConfig, registration: Registration) -> None:
    """Raise :class:`ConfigError` (one line) when the backend cannot start with ``rollout.backend_options``:
    what its options class says this machine lacks, else the keys and values it refuses."""
    model = registration.declared("options")
    if model is None:
        return
    name = config.rollout.backend
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise PluginError(f"rollout backend {name!r} declares options={model!r}, which must be a pydantic model class")
    options = backend_factory_options(config, model)
    missing = getattr(model, "missing_requirement", None)
    if missing is not None and (problem := missing(options)) is not None:
        raise ConfigError(f"rollout.backend={name}: {problem}")
    try:
        model.model_validate(options)
    except ValidationError as exc:
        fields = sorted(set(model.model_fields) - {"model"})
        problems = []
        for error in exc.errors():
            key = ".".join(["rollout.backend_options", *map(str, error["loc"])])
            if error["type"] == "extra_forbidden":
                close = difflib.get_close_matches(str(error["loc"][-1]), fields, n=1, cutoff=0.5)
                problems.append(f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
            else:
                problems.append(f"{key}: {error['msg'].removeprefix('Value error, ')}")
        raise ConfigError(f"rollout.backend={name} does not take these options: {'; '.join(problems)}. Its options: "
                          f"{', '.join(fields)} (docs: reference/recipe, 'Options added by plugins').") from None


def backend_capabilities(config: TrainConfig, plugin_manager: PluginManager | None = None) -> BackendCapabilities:
    """What ``config``'s rollout backend declares it can do (its registration's ``capabilities``)."""
    pm = plugin_manager or get_plugin_manager()
    return capabilities_of(pm.registration("rollout_backend", config.rollout.backend).declared("capabilities"))


def bind_plugin_options(config: TrainConfig, plugin_manager: PluginManager) -> TrainConfig:
    """A copy of ``config`` whose advantage and round-schedule sections are the named plugins' own options,
    checked against everything the estimator, the scheduler and the rollout backend declare.

    Raises UnknownNameError when a plugin is not installed and ConfigError when a section has a key its
    plugin does not take (or a bad value), or the recipe asks for what a declaration rules out.
    """
    alg = config.algorithm
    registered = plugin_manager.registration("advantage_estimator", alg.estimator)
    estimator = registered.declared("options")
    scheduler = plugin_manager.registration("round_scheduler", alg.rounds_ctrl.type).declared("options")
    backend = plugin_manager.registration("rollout_backend", config.rollout.backend)
    check_backend_options(config, backend)
    if registered.declared("critic") and not alg.critic.enabled:
        raise ConfigError(f"algorithm.estimator={alg.estimator} reads critic values, so it needs "
                          "algorithm.critic.enabled=true (or pick an estimator without a critic, e.g. grpo)")
    check_group_size(config, None, registered.declared("min_group_size"))
    capabilities = capabilities_of(backend.declared("capabilities"))
    if config.rollout.constrain_actions and not capabilities.constrain_actions:
        raise ConfigError(f"rollout.constrain_actions with rollout.backend={config.rollout.backend}: that backend does "
                          "not declare it can restrict a reply's action to the listed ones (constrain_actions); use "
                          "rollout.backend=transformers or turn it off")
    # A LoRA learner sends only the adapters to a rollout side with weights of its own: every backend that does
    # not sample the learner's own module, and a sharing one's private copy (several ranks, asynchronous rollouts).
    copies = config.trainer.learners > 1 or config.rollout.max_staleness > 0
    if config.model.lora.enabled and not capabilities.lora_adapters and capabilities.weight_sync != "none" and (
            copies or not capabilities.shares_trainer_module):
        where = (f"trainer.learners={config.trainer.learners}, rollout.max_staleness={config.rollout.max_staleness}"
                 if copies else f"rollout.backend={config.rollout.backend}, which keeps its own weights")
        raise ConfigError(f"model.lora.enabled with {where}: the learner sends the rollout backend only the adapters, "
                          f"which rollout.backend={config.rollout.backend} does not declare it takes (lora_adapters); "
                          "use a backend that does (transformers, vllm)")
    bound = config.model_copy(deep=True)
    bound._backend_shares_module = capabilities.shares_trainer_module
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
