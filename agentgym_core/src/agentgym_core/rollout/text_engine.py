"""Text-level rollouts for models behind a chat API: messages in, text out, for evaluation only.

API models (OpenAI-compatible servers) return text, not token ids or log-probs, so their
trajectories cannot be trained on: the tokens the model sampled are unknown, and re-encoding its
text is exactly what the token engine refuses to do. This module runs the same multi-turn loop
as :class:`agentgym_core.rollout.RolloutEngine` at the message level instead:

    each of num_envs workers, concurrently:
        take the next episode; reset its environment (timed out after step_timeout_s)
        loop: backend.chat(messages) -> reply text; env.parse_action + env.step -> observation

Every trajectory waits only for its own model call and its own environment (no round barrier);
an API server batches the concurrent requests itself. Failures end the trajectory with a recorded
reason, never silently: ``env_error: ...`` and ``timeout: ...`` as in the token engine, and
``model_error: ...`` when the API call fails after the backend's retries. A reply that the server
refuses because the conversation outgrew the model's context truncates with ``token_budget``.

The result is a :class:`TextTrajectory`: a :class:`Trajectory` with ``trainable=False``, no
``token_ids`` / ``loss_mask`` / ``logprobs`` (empty spans, ``reward_index=-1``), and the token
counts the server reported (``usage``). Its log line (:func:`text_trajectory_log_record`) is the
ordinary ``agentgym.trajectory/1`` record with ``tokens`` absent, the mask counts 0, and two more
keys: ``trainable: false`` and ``usage: {prompt_tokens, completion_tokens}`` (per turn too).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from agentgym_core.env import Env
from agentgym_core.rollout.backend import SamplingParams
from agentgym_core.rollout.episode import (
    EngineBase,
    EnvSlot,
    EpisodeSpec,
    env_error_reason,
    record_reset,
    record_step,
    timeout_reason,
    truncate,
)
from agentgym_core.rollout.logs import RolloutLogWriter, trajectory_log_record
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn

__all__ = [
    "ChatBackend",
    "ChatBackendError",
    "ChatReply",
    "ContextLengthError",
    "TextRolloutEngine",
    "TextRolloutLogWriter",
    "TextTrajectory",
    "TextTurn",
    "is_chat_backend",
    "text_trajectory_log_record",
]


class ChatReply(BaseModel):
    """One reply of a chat model, as text."""

    text: str = Field(description="The assistant message's content.")
    finish_reason: Literal["eos", "stop_string", "length"] = Field(
        description="'eos' when the model ended the reply (OpenAI's 'stop', which also covers stop strings), "
        "'length' when it hit max_tokens."
    )
    prompt_tokens: int | None = Field(default=None, description="Prompt tokens the server counted, if it said.")
    completion_tokens: int | None = Field(default=None, description="Reply tokens the server counted, if it said.")


class ChatBackendError(RuntimeError):
    """A chat call failed for good (after the backend's own retries); the message says why."""


class ContextLengthError(ChatBackendError):
    """The server refused the conversation as longer than the model's context."""


@runtime_checkable
class ChatBackend(Protocol):
    """A text-in, text-out model: what :class:`TextRolloutEngine` calls, from many threads at once.

    ``chat`` must be thread-safe. It raises :class:`ChatBackendError` (or
    :class:`ContextLengthError`) when a reply cannot be had. A backend may also define
    ``preflight() -> None``, called once before a run, which raises when the configuration is
    certainly wrong (unknown model, rejected API key), so a run fails fast instead of per episode.
    """

    name: str

    def chat(self, messages: Sequence[Mapping[str, str]], params: SamplingParams) -> ChatReply:
        """One reply to ``messages`` sampled with ``params`` (``max_new_tokens`` caps the reply)."""
        ...


def is_chat_backend(backend: object) -> bool:
    """True for text-only backends (a ``chat`` method and no token-level ``generate``)."""
    return callable(getattr(backend, "chat", None)) and not callable(getattr(backend, "generate", None))


class TextTurn(Turn):
    """A turn of a text-only trajectory: no token spans, the server's token counts instead."""

    prompt_tokens: int | None = Field(default=None, description="Prompt tokens of this turn's call (server count).")
    completion_tokens: int | None = Field(default=None, description="Reply tokens (server count).")


class TextTrajectory(Trajectory):
    """A trajectory produced from text replies: for evaluation, never for training."""

    trainable: bool = Field(
        default=False, description="False: no sampled token ids or log-probs exist for this trajectory."
    )
    prompt_tokens: int = Field(default=0, description="Sum of prompt tokens over all calls (server counts).")
    completion_tokens: int = Field(default=0, description="Sum of reply tokens over all calls (server counts).")


def text_trajectory_log_record(traj: Trajectory, *, step: int = -1) -> dict[str, Any]:
    """The ``agentgym.trajectory/1`` record of a text trajectory (see the module docstring)."""
    record = trajectory_log_record(traj, step=step, include_tokens=False)
    record["trainable"] = bool(getattr(traj, "trainable", True))
    if isinstance(traj, TextTrajectory):
        record["usage"] = {"prompt_tokens": traj.prompt_tokens, "completion_tokens": traj.completion_tokens}
        for line, turn in zip(record["turns"], traj.turns, strict=True):
            if isinstance(turn, TextTurn):
                line["usage"] = {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens}
    return record


class TextRolloutLogWriter(RolloutLogWriter):
    """:class:`RolloutLogWriter` for text trajectories (no ``tokens``; ``trainable`` and ``usage`` added)."""

    def __init__(self, path: Any, *, step: int = -1) -> None:
        super().__init__(path, step=step, include_tokens=False)

    def write(self, traj: Trajectory) -> None:
        self._file.write(json.dumps(text_trajectory_log_record(traj, step=self.step), ensure_ascii=False) + "\n")
        self._file.flush()


class _EpisodeFailed(Exception):
    """Ends one episode with a recorded reason (internal control flow)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TextRolloutEngine(EngineBase[ChatBackend]):
    """Runs episodes with a :class:`ChatBackend` over a pool of environment instances.

    Same arguments and ``run`` contract as :class:`agentgym_core.rollout.RolloutEngine`
    (``config.synchronous`` is not supported: API calls have no batch to synchronise).
    ``config.max_total_tokens`` applies to the token counts the server reports: each reply is
    capped by the budget left after the previous answer (the observation added since is only
    counted in the next answer, so the last call may overshoot by one observation).
    """

    def _setup(self) -> None:
        if self.multi_env:
            raise ValueError("the text engine plays one environment; give it one make_env (and num_envs)")
        if self.config.synchronous:
            raise ValueError("the text engine has no round-synchronous mode; set synchronous=False")
        self._lock = threading.Lock()  # guards stats, the idle slots, on_done and on_turn across worker threads
        self._on_turn: Callable[[Trajectory], None] | None = None
        # Env calls run here so a hung call can be abandoned at its timeout; the extra threads
        # leave room for calls that are still hanging after their episode gave up on them.
        self._pool = ThreadPoolExecutor(max_workers=2 * self.num_envs, thread_name_prefix="agentgym-text-env")

    # -- public ------------------------------------------------------------------------------
    def run(
        self,
        episodes: Sequence[EpisodeSpec],
        *,
        step: int = 0,
        on_done: Callable[[Trajectory], None] | None = None,
        on_turn: Callable[[Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Roll out every episode; returns trajectories in the order of ``episodes``.

        ``on_done`` is called once per finished trajectory, ``on_turn`` after each reply (its
        trajectory's last turn); one call at a time.
        """
        self._on_turn = on_turn
        max_turns = self._turn_budget(step)
        t0 = time.perf_counter()
        trajs = [self._new_trajectory(spec, max_turns, TextTrajectory) for spec in episodes]
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(len(episodes)):
            todo.put(index)

        def worker() -> None:
            with self._lock:
                slot = self._idle[None].pop() if self._idle[None] else EnvSlot()
            while True:
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    break
                slot = self._episode(slot, episodes[index], index, trajs[index], max_turns)
                with self._lock:
                    self._count(trajs[index])
                    if on_done is not None:
                        on_done(trajs[index])
            with self._lock:
                self._idle[None].append(slot)

        threads = [threading.Thread(target=worker, name=f"agentgym-text-{i}", daemon=True)
                   for i in range(min(self.num_envs, len(episodes)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.stats.wall_seconds += time.perf_counter() - t0
        return list(trajs)

    # -- one episode (runs in a worker thread) ------------------------------------------------------
    def _episode(self, slot: EnvSlot, spec: EpisodeSpec, index: int, traj: TextTrajectory, max_turns: int) -> EnvSlot:
        """Play one episode into ``traj``; returns the slot for the next one (fresh if this one broke)."""
        cfg = self.config
        start = time.perf_counter()
        deadline = start + cfg.episode_timeout_s if cfg.episode_timeout_s is not None else float("inf")
        try:
            self._play(slot, spec, index, traj, max_turns, deadline)
        except _EpisodeFailed as failure:
            traj.failed, traj.failure_reason = True, failure.reason
        traj.wall_seconds = time.perf_counter() - start
        if slot.broken:
            return EnvSlot()
        return slot

    def _play(self, slot: EnvSlot, spec: EpisodeSpec, index: int, traj: TextTrajectory, max_turns: int,
              deadline: float) -> None:
        cfg = self.config
        (instruction, tools, first), seconds = self._env_call(slot, lambda: self._reset_env(slot, spec), "reset",
                                                             deadline)
        # A chat API renders its own template: tools are described in the system message (the fallback).
        record_reset(traj, instruction, first.observation, seconds=seconds, env_name=self.env_name,
                     instruction_role=cfg.instruction_role, info=first.info, tools=tools)
        used = 0  # tokens of the conversation so far, as the server counts them
        while True:
            if time.perf_counter() >= deadline:
                raise _EpisodeFailed(timeout_reason(cfg, episode_over=True))
            room = cfg.max_total_tokens - used
            if room <= 0:
                truncate(traj, "token_budget")
                return
            reply, gen_seconds = self._chat(traj, index, min(cfg.sampling.max_new_tokens, room))
            if reply is None:  # the server said the conversation no longer fits the model
                truncate(traj, "token_budget")
                return
            if reply.prompt_tokens is not None and reply.completion_tokens is not None:
                used = reply.prompt_tokens + reply.completion_tokens
            budget_hit = reply.finish_reason == "length" and room < cfg.sampling.max_new_tokens
            turn = TextTurn(
                index=len(traj.turns), context_span=Span(start=0, end=0), action_span=Span(start=0, end=0),
                text=reply.text, action="", finish_reason="token_budget" if budget_hit else reply.finish_reason,
                reward_index=-1, gen_seconds=gen_seconds, prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
            )
            traj.turns.append(turn)
            traj.messages.append({"role": "assistant", "content": reply.text})
            if self._on_turn is not None:
                with self._lock:
                    self._on_turn(traj)
            env = slot.env
            assert env is not None

            def step(env: Env = env, text: str = reply.text) -> tuple[str, Any]:
                action = env.parse_action(text)
                return action, env.step(action)

            (action, result), seconds = self._env_call(slot, step, "step", deadline)
            if not record_step(traj, action, result, seconds, max_turns,
                               end_on_invalid=cfg.end_on_invalid_action):
                return
            if used >= cfg.max_total_tokens:
                truncate(traj, "token_budget")
                return

    def _chat(self, traj: TextTrajectory, index: int, cap: int) -> tuple[ChatReply | None, float]:
        sampling = self.config.sampling
        update: dict[str, Any] = {"max_new_tokens": cap}
        if sampling.seed is not None:
            # Derived from the episode's position and turn, not a call counter: concurrent episodes
            # reach the model in any order, and the same run must ask for the same seeds.
            update["seed"] = sampling.seed + 100_003 * index + len(traj.turns)
        params = sampling.model_copy(update=update)
        t = time.perf_counter()
        try:
            reply = self.backend.chat(traj.messages, params)
        except ContextLengthError:
            reply = None
        except ChatBackendError as exc:
            raise _EpisodeFailed(f"model_error: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 -- a backend bug must still end up recorded, not lost
            raise _EpisodeFailed(f"model_error: {type(exc).__name__}: {exc}") from exc
        finally:
            seconds = time.perf_counter() - t
            traj.gen_seconds += seconds
            with self._lock:
                self.stats.generation_calls += 1
                self.stats.gen_seconds += seconds
        if reply is not None:
            traj.prompt_tokens += reply.prompt_tokens or 0
            traj.completion_tokens += reply.completion_tokens or 0
            with self._lock:
                self.stats.sampled_tokens += reply.completion_tokens or 0
        return reply, seconds

    def _env_call(self, slot: EnvSlot, call: Callable[[], Any], phase: str, deadline: float) -> tuple[Any, float]:
        """Run ``call`` in the env pool; a timeout or exception breaks the slot and fails the episode."""
        cfg = self.config
        t = time.perf_counter()
        if t >= deadline:  # checked first, so an env that is merely late is not discarded as broken
            raise _EpisodeFailed(timeout_reason(cfg, episode_over=True))
        future: Future = self._pool.submit(call)
        limit = min(cfg.step_timeout_s, max(0.0, deadline - t))
        try:
            return future.result(timeout=limit), time.perf_counter() - t
        except FutureTimeout:
            slot.broken = True
            future.add_done_callback(lambda _f: slot.close())  # closed once the stuck call returns
            raise _EpisodeFailed(timeout_reason(cfg, episode_over=deadline - t <= cfg.step_timeout_s)) from None
        except Exception as exc:  # noqa: BLE001 -- recorded as the episode's failure reason
            slot.broken = True
            slot.close()
            raise _EpisodeFailed(env_error_reason(phase, exc)) from exc
