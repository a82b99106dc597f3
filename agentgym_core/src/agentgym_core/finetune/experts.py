"""Expert episodes as trainable trajectories.

Experts come from plugins: an environment package registers an
:class:`agentgym_core.experts.ExpertSpec` under its environment's name through the
``agentgym_register_experts`` hook; :func:`get_expert` looks it up. The expert plays through
``env.reset``/``env.step`` and :class:`RecordingEnv` records every step on the way.

Expert trajectories. The expert's actions become replies ``"Thought: <thought>\\nAction: <action>"``
(the ReAct format every environment's instruction asks for and ``parse_react_action`` reads), and
the chat is tokenised with the model's own template exactly as the rollout engine would have
(:func:`agentgym_core.finetune.data.tokenize_messages`), so the SFT mask is the RL mask.
The expert's tokens were not sampled: their ``logprobs`` are 0.0 (no importance ratio uses them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from agentgym_core.env import Env, ResetResult, StepResult
from agentgym_core.experts import ExpertSpec, NoExpertError
from agentgym_core.finetune.data import tokenize_messages
from agentgym_core.plugins import PluginManager, get_plugin_manager
from agentgym_core.rollout.chat import ChatFormat
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn

__all__ = [
    "ExpertSpec",
    "NoExpertError",
    "RecordingEnv",
    "expert_reply",
    "expert_trajectory",
    "get_expert",
    "play_expert",
]


def get_expert(env_name: str, plugin_manager: PluginManager | None = None) -> ExpertSpec:
    """The expert registered for environment ``env_name`` (``agentgym_register_experts``)."""
    pm = plugin_manager or get_plugin_manager()
    experts = pm.catalog("expert")
    if env_name in experts:
        spec = experts[env_name].obj
        if not isinstance(spec, ExpertSpec):
            raise TypeError(f"the expert registered for {env_name!r} by plugin {experts[env_name].plugin!r} "
                            f"is a {type(spec).__name__}, expected agentgym_core.experts.ExpertSpec")
        return spec
    known = ", ".join(sorted(experts)) or "none"
    raise NoExpertError(
        f"environment {env_name!r} has no expert policy (environments with one: {known}). "
        "Register one from the environment's package: `@hookimpl def agentgym_register_experts(register): "
        f"register({env_name!r}, ExpertSpec(play=fn))` where fn(env, task_id) plays one episode through "
        "env.reset/env.step (from agentgym_core.experts import ExpertSpec); or collect with a model: --policy MODEL."
    )


class _TurnBudget(BaseException):  # not Exception: solvers that catch their own errors must not swallow it
    """Raised inside the expert when it used up its turn budget (stops any solver loop)."""


class RecordingEnv(Env):
    """Passes reset/step through to ``inner`` and records them; stops the expert after ``max_turns``."""

    def __init__(self, inner: Env, max_turns: int | None = None) -> None:
        self.inner, self.max_turns = inner, max_turns
        self.name = inner.name
        self.reset_result: ResetResult | None = None
        self.task_id: int | None = None
        self.steps: list[tuple[str, StepResult, float]] = []

    @property
    def instruction(self) -> str:
        return self.inner.instruction

    def parse_action(self, text: str) -> str:
        return self.inner.parse_action(text)

    def tasks(self):  # type: ignore[override]  # the inner env's catalog (an HTTPEnv's is per instance)
        return self.inner.tasks()

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        self.reset_result = self.inner.reset(task_id, seed=seed)
        self.task_id = task_id
        self.steps = []
        return self.reset_result

    def step(self, action: str) -> StepResult:
        if self.max_turns is not None and len(self.steps) >= self.max_turns:
            raise _TurnBudget
        t = time.perf_counter()
        result = self.inner.step(action)
        self.steps.append((action, result, time.perf_counter() - t))
        return result

    def available_actions(self) -> list[str] | None:
        return self.inner.available_actions()

    def close(self) -> None:
        self.inner.close()

    def detached(self) -> RecordingEnv:
        """This recording without the live environment (what :func:`expert_trajectory` reads stays), so it
        can be pickled back from a worker process."""
        copy = RecordingEnv.__new__(RecordingEnv)
        copy.__dict__.update(self.__dict__)
        copy.inner = _Played(name=self.inner.name, instruction=self.inner.instruction)
        return copy


@dataclasses.dataclass(frozen=True)
class _Played:
    """What a detached recording keeps of its environment."""

    name: str
    instruction: str

    def close(self) -> None:
        pass


def expert_reply(action: str, thought: str | None = None) -> str:
    """The reply an agent would write to take ``action`` (ReAct: a thought, then the action line)."""
    return f"Thought: {thought or f'I will {action}.'}\nAction: {action}"


class _ExpertTimeout(BaseException):  # not Exception: the BabyAI expert retries on Exception
    """Raised (by an interval timer) inside an expert that ran past its time limit."""


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (main thread only: elsewhere there is no limit).

    Solvers can hang: minigrid's BabyAIBot searches forever on some UnlockToUnlock layouts
    (train task 748), so an expert episode needs a wall-clock limit like a model's.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _ExpertTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def play_expert(
    expert: ExpertSpec, env: Env, task_id: int, *, max_turns: int | None = None, timeout_s: float | None = 30.0
) -> tuple[RecordingEnv, str | None]:
    """Play one expert episode; returns the recording and the error that ended it early, if any."""
    recorder = RecordingEnv(env, max_turns=max_turns)
    error = None
    try:
        with _time_limit(timeout_s):
            expert.play(recorder, task_id)
    except _TurnBudget:
        error = "max_turns"
    except _ExpertTimeout:
        error = f"timeout: expert took longer than {timeout_s:g}s"
    except Exception as exc:  # a solver's own failure ends its episode, recorded, as in the rollout engine
        error = f"expert_error: {type(exc).__name__}: {exc}"
    return recorder, error


def expert_trajectory(
    recording: RecordingEnv,
    chat: ChatFormat,
    *,
    env_name: str,
    instruction_role: str = "system",
    category: str | None = None,
    error: str | None = None,
    thought: Callable[[ResetResult, str], str] | None = None,
) -> Trajectory:
    """The recorded expert episode as a :class:`Trajectory` with tokens, mask and turn spans.

    ``thought`` writes each reply's thought (an :attr:`ExpertSpec.thought`); default ``I will <action>.``
    """
    if recording.reset_result is None or recording.task_id is None:
        raise ValueError("the expert never reset the environment")
    instruction, first = recording.instruction, recording.reset_result.observation
    if instruction_role == "system":
        messages = [{"role": "system", "content": instruction}, {"role": "user", "content": first}]
    else:
        messages = [{"role": "user", "content": f"{instruction}\n\n{first}"}]
    traj = Trajectory(env=env_name, task_id=recording.task_id, category=category, temperature=1.0)
    replies = [expert_reply(action, thought(recording.reset_result, action) if thought else None)
               for action, _, _ in recording.steps]
    for reply, (_, result, _) in zip(replies, recording.steps, strict=True):
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": result.observation}]
    traj.messages = messages
    if not recording.steps:
        traj.failed, traj.failure_reason = True, error or "the expert took no action"
        return traj
    ids, mask = tokenize_messages(chat, messages)
    traj.token_ids, traj.loss_mask, traj.logprobs = ids, mask, [0.0] * len(ids)
    traj.prompt_length = mask.index(1)
    # Action spans are the runs of 1s in the mask (every reply is trained and non-empty).
    spans: list[Span] = []
    for i, m in enumerate(mask):
        if m and (i == 0 or not mask[i - 1]):
            spans.append(Span(start=i, end=i))
        if m:
            spans[-1].end = i + 1
    if len(spans) != len(recording.steps):
        raise AssertionError(f"{len(spans)} trained spans for {len(recording.steps)} expert turns")
    previous_end = 0
    for k, ((action, result, seconds), span) in enumerate(zip(recording.steps, spans, strict=True)):
        traj.turns.append(Turn(
            index=k, context_span=Span(start=previous_end, end=span.start), action_span=span,
            text=replies[k], action=action, finish_reason="eos", observation=result.observation,
            reward=float(result.reward), reward_index=span.end - 1, success=result.success,
            env_seconds=seconds, info=dict(result.info),
        ))
        previous_end = span.end
        traj.outcome_reward += float(result.reward)
        traj.env_seconds += seconds
        if result.success is not None:
            traj.success = bool(result.success)
    last = recording.steps[-1][1]
    traj.terminated = last.terminated
    if not last.terminated:
        traj.truncated = True
        traj.truncation_reason = "env_step_limit" if last.truncated else "max_turns"
    if error is not None and error != "max_turns":
        traj.failed, traj.failure_reason = True, error
    traj.max_turns = recording.max_turns
    return traj
