"""The extension API of agentgym: every hook a plugin may implement.

A plugin is any module or object with functions marked ``@agentgym_core.hookimpl`` whose names
match the specs below. Installed packages expose plugins through the entry-point group
``agentgym``::

    [project.entry-points.agentgym]
    myenv = "my_package.plugin"

Hooks are always called with keyword arguments, and an implementation may accept any subset of
them (pluggy's opt-in arguments), so new arguments can be added without breaking plugins.

Catalog hooks receive a ``register`` callback and call it once per thing they provide. All
catalog callbacks share one signature::

    register(name: str, obj: object, *, summary: str = "") -> None

``obj`` may be the object or a ``"module:attribute"`` string naming it; the module is then
imported only when the object is first used, so listing what is installed (``agentgym plugins``,
``agentgym serve`` of another plugin's env) does not import your dependencies. Name the plugin's
entry point after the env it serves: ``agentgym serve NAME`` imports the entry point called NAME
first.

Every catalog hook is called for every plugin (no result wins); two plugins registering the same
name in one catalog is an error naming both packages. Observer hooks return nothing and are called
for every plugin, in registration order reversed (pluggy's LIFO).
"""

from __future__ import annotations

from typing import Any, Protocol

import pluggy

PROJECT_NAME = "agentgym"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class Register(Protocol):
    """``register(name, obj, summary=..., **declared)``: ``declared`` are what a plugin says about ``obj``
    (:class:`agentgym_core.plugins.PluginSpec`: ``options=``, ``min_group_size=``, ``critic=``, ``capabilities=``,
    by kind)."""

    def __call__(self, name: str, obj: Any, *, summary: str = "", **declared: Any) -> None: ...


# --------------------------------------------------------------------------------------------
# Catalog hooks: called once when the plugin manager builds its registries.
# --------------------------------------------------------------------------------------------


@hookspec
def agentgym_register_envs(register: Register) -> None:
    """Register environment classes.

    ``obj`` is a subclass of :class:`agentgym_core.env.Env`; it is instantiated with keyword
    arguments from the user's config (``EnvClass(**env_kwargs)``). The name is what users type in
    ``agentgym serve NAME`` and in configs.
    """


@hookspec
def agentgym_register_advantage_estimators(register: Register) -> None:
    """Register advantage estimators.

    ``obj`` is a callable ``estimate(batch, config) -> AdvantageOutput`` (see the trainer's
    ``agentgym_core.rl`` module for the batch layout). ``agentgym_core.testing.check_estimator``
    checks the contract. An estimator whose baseline is the other samples of a task declares it,
    ``register(name, obj, min_group_size=2)``; the trainer then refuses a smaller ``rollout.group_size``.
    One that reads critic values (``batch.values``) declares ``critic=True``; the recipe must then enable
    ``algorithm.critic``.
    Options of its own: ``register(name, obj, options=MyOptions)``, a subclass of ``AdvantageConfig``
    with typed fields; the recipe's ``algorithm.advantage`` is checked against it and ``config`` is an
    instance of it (``agentgym_core.rl.plugin_options``).
    """


@hookspec
def agentgym_register_rollout_backends(register: Register) -> None:
    """Register rollout (generation) backends.

    ``obj`` is a factory ``make_backend(config) -> RolloutBackend`` producing an object that
    samples token ids and their log-probs for many live trajectories at once
    (``agentgym_core.rollout.backend``; ``agentgym_core.testing.check_backend`` checks it). A
    factory may instead return a text-only ``ChatBackend`` (``agentgym_core.rollout.text_engine``,
    e.g. an API model): such trajectories carry no token ids and serve evaluation only. What the
    trainer may rely on: ``register(name, make_backend, capabilities=BackendCapabilities(...))``
    (or a ``"module:attribute"`` reference to one, so that listing plugins imports nothing); the
    trainer's defaults follow these declarations, never the backend's name. ``options=`` a pydantic
    class checks ``rollout.backend_options`` when the recipe loads (``agentgym_core.rl.plugin_options``).
    """


@hookspec
def agentgym_register_round_schedulers(register: Register) -> None:
    """Register round (turn-budget) schedulers.

    ``obj`` is a factory ``make_scheduler(config: RoundsConfig) -> RoundScheduler``
    (``agentgym_core.schedulers``). The scheduler's ``horizon(step)`` returns the maximum number of
    turns per trajectory at a training step (ScalingInter-RL grows it in stages);
    ``update(step, metrics)`` lets adaptive schedules react to training success; ``state_dict()``
    and ``load_state_dict(state)`` make a resumed run continue exactly where it stopped; an optional
    ``max_horizon()`` names the horizon held-out evaluations play (default: the longest ``horizon(step)``
    over the run's steps). Options of its own: ``register(name, make_scheduler, options=MyRounds)``,
    a subclass of ``RoundsConfig``; the recipe's ``algorithm.rounds_ctrl`` is checked against it and
    passed as an instance of it.
    """


@hookspec
def agentgym_register_experts(register: Register) -> None:
    """Register expert policies, keyed by the name of the environment they play.

    ``obj`` is an :class:`agentgym_core.experts.ExpertSpec`: ``play(env, task_id)`` plays one
    episode through ``env.reset``/``env.step`` only (so it works in-process and over HTTP), plus
    the constructor options it needs from the environment and an optional thought writer.
    ``agentgym collect --policy expert`` and a recipe's ``warm_start.expert`` use it. Any package
    may register the expert of any environment (one per environment name).
    """


# --------------------------------------------------------------------------------------------
# Observer hooks: called at the lifecycle points of a training or evaluation run.
# --------------------------------------------------------------------------------------------


@hookspec
def agentgym_observe_run_start(run_dir: str, config: dict[str, Any]) -> None:
    """A run starts. ``config`` is the resolved configuration as saved in ``run_dir``."""


@hookspec
def agentgym_observe_rollout(step: int, trajectories: list[Any], metrics: dict[str, float]) -> None:
    """A batch of trajectories was collected at training ``step`` (before the update)."""


@hookspec
def agentgym_observe_update(step: int, metrics: dict[str, float]) -> None:
    """The policy (and critic) were updated at training ``step``; ``metrics`` are its numbers."""


@hookspec
def agentgym_observe_evaluation(step: int, results: dict[str, Any]) -> None:
    """An evaluation finished at ``step`` (``-1`` outside training); ``results`` as in eval JSON."""


@hookspec
def agentgym_observe_run_end(run_dir: str, metrics: dict[str, float], error: str | None) -> None:
    """A run ends; ``error`` is the exception text when it ended by failure, else None."""


CATALOG_HOOKS: dict[str, str] = {
    "env": "agentgym_register_envs",
    "advantage_estimator": "agentgym_register_advantage_estimators",
    "rollout_backend": "agentgym_register_rollout_backends",
    "round_scheduler": "agentgym_register_round_schedulers",
    "expert": "agentgym_register_experts",
}
"""Catalog kind -> the hook that fills it."""

OBSERVER_HOOKS: tuple[str, ...] = (
    "agentgym_observe_run_start",
    "agentgym_observe_rollout",
    "agentgym_observe_update",
    "agentgym_observe_evaluation",
    "agentgym_observe_run_end",
)
