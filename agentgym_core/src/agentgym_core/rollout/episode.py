"""What both rollout engines share: environment slots, episode bookkeeping, and the engine's lifecycle.

:class:`~agentgym_core.rollout.RolloutEngine` (token level, one loop in the calling thread) and
:class:`~agentgym_core.rollout.text_engine.TextRolloutEngine` (text level, one worker thread per
environment instance) schedule the model differently, but play an episode against its
environment the same way. That part lives here, once:

- :class:`EpisodeSpec`, :class:`EngineConfig`, :class:`RolloutStats`: what to roll out, how, and
  what a run did (both engines take and report the same);
- :class:`EnvSource`: one of several environments a single engine plays (a step's episodes of every
  environment then share the model's batch instead of running one environment after another);
- :class:`EnvSlot`: one environment instance, created lazily, discarded once broken;
- :class:`EngineBase`: the constructor both engines take, the turn budget, a fresh trajectory per
  episode, the reset call, the run statistics, and closing;
- :func:`record_reset` / :func:`record_step`: fold an environment answer into the trajectory and
  decide whether the episode ends (``terminated``, or truncated by ``env_step_limit``,
  ``max_turns`` or, when asked, a refused action);
- :func:`timeout_reason` / :func:`env_error_reason`: the recorded ``failure_reason`` strings.

The token budget is not here: the token engine counts the tokens it appends, the text engine the
tokens the server reports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from agentgym_core.env import STATE_KEY, Env, ResetResult, StepResult
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.rollout.tool_calls import describe_tools
from agentgym_core.rollout.trajectory import Trajectory
from agentgym_core.schedulers import RoundScheduler

__all__ = [
    "EngineBase",
    "EnvSlot",
    "EnvSource",
    "EpisodeSpec",
    "EngineConfig",
    "RolloutStats",
    "env_error_reason",
    "record_reset",
    "record_step",
    "server_of",
    "timeout_reason",
    "truncate",
]

BackendT = TypeVar("BackendT")
TrajectoryT = TypeVar("TrajectoryT", bound=Trajectory)
EngineT = TypeVar("EngineT", bound="EngineBase")


class EngineConfig(BaseModel):
    """How the rollout engine plays episodes (the recipe's `rollout` section is :class:`agentgym_core.rl.config.RolloutConfig`)."""

    model_config = ConfigDict(extra="forbid")

    sampling: SamplingParams = Field(default_factory=SamplingParams, description="Per-turn sampling settings.")
    max_turns: int = Field(
        default=20, ge=1, description="Turn budget per trajectory when no round scheduler is given."
    )
    max_total_tokens: int = Field(
        default=4096, ge=16,
        description="Token budget per trajectory (prompt + all turns); reaching it truncates with "
        "truncation_reason='token_budget'.",
    )
    step_timeout_s: float = Field(default=60.0, gt=0, description="Limit on one env create/reset/step call.")
    episode_timeout_s: float | None = Field(
        default=None, gt=0, description="Wall-clock limit on one episode (None: no limit)."
    )
    env_workers: int = Field(default=16, ge=1, description="Threads running environment calls concurrently.")
    instruction_role: str = Field(
        default="system",
        description="Where the env's instruction goes: 'system' message, or 'user' (prefixed to the first "
        "observation) for templates without a system role.",
    )
    synchronous: bool = Field(
        default=False, description="Round-synchronous baseline: every turn waits for the slowest trajectory."
    )
    end_on_invalid_action: bool = Field(
        default=False,
        description="End an episode at the first action the environment refuses (truncation_reason "
        "'invalid_action'), keeping the reward earned so far.",
    )
    reuse_kv_cache: bool = Field(
        default=True,
        description="Keep each trajectory's KV cache between its turns, so a turn prefills only its new tokens "
        "(backends implementing SessionBackend); False re-reads the whole history every turn.",
    )


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to roll out: a task, its seed, and which sample of the task it is."""

    task_id: int
    seed: int | None = None
    sample_index: int = 0
    category: str | None = None
    env: str | None = None  # which of a multi-environment engine's sources plays it (None: the only one)


@dataclass(frozen=True)
class EnvSource:
    """One environment of a multi-environment engine: how to make an instance, and how many may live at once."""

    make_env: Callable[[], Env]
    num_envs: int = 8


@dataclass
class RolloutStats:
    """What one ``run`` did, for progress lines and benchmarks."""

    trajectories: int = 0
    failed: int = 0
    failure_reasons: dict[str, int] = field(default_factory=dict)
    generation_calls: int = 0  # backend generate calls, or decode steps of the running batch
    runs: int = 0  # finished ``run`` calls (the continuous path's seed offset)
    sampled_tokens: int = 0
    wall_seconds: float = 0.0
    gen_seconds: float = 0.0


@dataclass
class EnvSlot:
    """One environment instance (created lazily by the first reset); a broken one is never reused."""

    env: Env | None = None
    broken: bool = False
    source: str | None = None  # the EnvSource it came from (None: a single-environment engine's)

    def close(self) -> None:
        """Close the instance, if one was created; errors are swallowed."""
        if self.env is not None:
            with contextlib.suppress(Exception):  # a broken env may fail to close; it is discarded anyway
                self.env.close()
            self.env = None


class EngineBase(Generic[BackendT]):
    """The part of a rollout engine that does not depend on how the model is called.

    A subclass implements ``run``, and ``_setup`` (called last by ``__init__``) creates ``self._pool``,
    the threads that run environment calls (how many depends on how it uses them), and its own state.

    ``make_env`` is one environment's factory (with ``num_envs`` and ``env_name``), or a mapping from
    environment name to :class:`EnvSource` for an engine that plays several environments in one
    run; each episode then names its environment in ``EpisodeSpec.env``.
    """

    _pool: ThreadPoolExecutor

    def __init__(
        self,
        backend: BackendT,
        make_env: Callable[[], Env] | Mapping[str, EnvSource],
        *,
        num_envs: int = 8,
        config: EngineConfig | None = None,
        scheduler: RoundScheduler | None = None,
        env_name: str | None = None,
    ) -> None:
        if isinstance(make_env, Mapping):
            if not make_env or env_name is not None:
                raise ValueError("a multi-environment engine takes a non-empty mapping of env name -> EnvSource, "
                                 "and no env_name (each episode names its env in EpisodeSpec.env)")
            self.sources: dict[str | None, EnvSource] = dict(make_env)
        else:
            self.sources = {None: EnvSource(make_env, num_envs)}
        for name, source in self.sources.items():
            if source.num_envs < 1:
                raise ValueError(f"num_envs must be >= 1, got {source.num_envs}" + (f" for {name!r}" if name else ""))
        self.backend = backend
        self.num_envs = sum(source.num_envs for source in self.sources.values())
        self.config = config or EngineConfig()
        self.scheduler = scheduler
        self.env_name = env_name
        self.stats = RolloutStats()
        self._idle: dict[str | None, list[EnvSlot]] = {key: [] for key in self.sources}  # healthy, between episodes
        self._setup()

    def _setup(self) -> None:
        """Validate what only this engine cares about; create the env thread pool and this engine's state."""
        raise NotImplementedError

    def _turn_budget(self, step: int) -> int:
        """Turns per trajectory at training step ``step``: the scheduler's horizon, else ``max_turns``."""
        return self.scheduler.horizon(step) if self.scheduler is not None else self.config.max_turns

    @property
    def multi_env(self) -> bool:
        """True when this engine plays several named environments (``EpisodeSpec.env`` picks one)."""
        return None not in self.sources

    def _source_key(self, spec: EpisodeSpec) -> str | None:
        """The key of the source that plays ``spec``; a clear error when it names none of them."""
        if not self.multi_env:
            return None
        if spec.env not in self.sources:
            raise ValueError(f"EpisodeSpec.env={spec.env!r} is not one of this engine's environments "
                             f"({', '.join(str(k) for k in self.sources)})")
        return spec.env

    def _new_trajectory(self, spec: EpisodeSpec, max_turns: int, cls: type[TrajectoryT]) -> TrajectoryT:
        """An empty trajectory for ``spec``."""
        return cls(
            env=(spec.env if self.multi_env else self.env_name) or "", task_id=spec.task_id, seed=spec.seed, sample_index=spec.sample_index,
            category=spec.category, max_turns=max_turns, temperature=self.config.sampling.logprob_temperature,
        )

    def _reset_env(self, slot: EnvSlot, spec: EpisodeSpec) -> tuple[str, list[dict] | None, ResetResult]:
        """Create the slot's instance if needed and reset it to the episode's task (runs in the pool);
        returns the instruction, the tool schemas (None for text actions) and the reset's answer."""
        if slot.env is None:
            slot.env = self.sources[slot.source].make_env()
        if not self.env_name and not self.multi_env:
            self.env_name = slot.env.name
        return slot.env.instruction, slot.env.tools, slot.env.reset(spec.task_id, seed=spec.seed)

    def _count(self, traj: Trajectory) -> None:
        """Add a finished trajectory to the run statistics (failures by the prefix of their reason)."""
        self.stats.trajectories += 1
        if traj.failed:
            self.stats.failed += 1
            key = (traj.failure_reason or "").split(":")[0]
            self.stats.failure_reasons[key] = self.stats.failure_reasons.get(key, 0) + 1

    def close(self) -> None:
        """Close every idle environment instance and stop the env thread pool."""
        for slots in self._idle.values():
            for slot in slots:
                slot.close()
            slots.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self: EngineT) -> EngineT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_reset(
    traj: Trajectory, instruction: str, observation: str, *, seconds: float, env_name: str | None,
    instruction_role: str, info: dict | None = None, tools: list[dict] | None = None, native_tools: bool = False,
) -> None:
    """Start the conversation from the reset's answer: the instruction as system message, or
    prefixed to the first observation when ``instruction_role`` is 'user'. ``info`` is the reset's
    (its ``state_key``, when the environment names states, becomes ``traj.start_state``). ``tools``
    (the environment's schemas) are kept in ``traj.tools`` for the chat template when ``native_tools``,
    else described after the instruction (``agentgym_core.rollout.tool_calls.describe_tools``)."""
    traj.env = traj.env or env_name or ""
    if tools and native_tools:
        traj.tools = tools
    elif tools:
        instruction = describe_tools(instruction, tools)
    state = (info or {}).get(STATE_KEY)
    traj.start_state = None if state is None else str(state)
    traj.env_seconds += seconds
    if instruction_role == "system":
        traj.messages = [{"role": "system", "content": instruction}, {"role": "user", "content": observation}]
    else:
        traj.messages = [{"role": "user", "content": f"{instruction}\n\n{observation}"}]


def record_step(traj: Trajectory, action: str, result: StepResult, seconds: float, max_turns: int, *,
                end_on_invalid: bool = False) -> bool:
    """Fold a step's answer into the last turn; True while the episode goes on.

    The episode ends when the env terminated it, truncated it (``env_step_limit``), the turn budget
    is spent (``max_turns``), or, with ``end_on_invalid``, the env refused the action (``invalid_action``).
    """
    turn = traj.turns[-1]
    turn.action, turn.observation, turn.reward = action, result.observation, float(result.reward)
    turn.success, turn.env_seconds, turn.info = result.success, seconds, dict(result.info)
    turn.invalid_action = result.invalid_action
    traj.env_seconds += seconds
    traj.outcome_reward += turn.reward
    if result.success is not None:
        traj.success = bool(result.success)
    traj.messages.append({"role": "user", "content": result.observation})
    if result.terminated:
        traj.terminated = True
    elif result.truncated:
        truncate(traj, "env_step_limit")
    elif end_on_invalid and result.invalid_action:
        truncate(traj, "invalid_action")
    elif len(traj.turns) >= max_turns:
        truncate(traj, "max_turns")
    else:
        return True
    return False


def truncate(traj: Trajectory, reason: str) -> None:
    """End the trajectory early for ``reason`` (one of ``Trajectory.truncation_reason``'s values)."""
    traj.truncated = True
    traj.truncation_reason = reason  # type: ignore[assignment]


def timeout_reason(config: EngineConfig, *, episode_over: bool) -> str:
    """The failure reason of a timeout: the episode's wall-clock limit, or one env call's."""
    if episode_over:
        return f"timeout: episode timeout after {config.episode_timeout_s:g}s"
    return f"timeout: env call timeout after {config.step_timeout_s:g}s"


def server_of(env: Env | None) -> str | None:
    """The URL of the server behind ``env`` (an HTTP environment's client), or None for an in-process one."""
    return getattr(getattr(env, "client", None), "base_url", None)


def env_error_reason(phase: str, error: BaseException) -> str:
    """The failure reason of an env call (``phase``: 'reset' or 'step') that raised ``error``."""
    return f"env_error: {phase} raised {type(error).__name__}: {error}"
