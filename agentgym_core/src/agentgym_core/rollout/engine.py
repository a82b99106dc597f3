"""The rollout engine: N trajectories over M environment instances, no round barrier.

One readable loop in the calling thread owns the model; a thread pool owns the environments.

    loop:
        give free environment instances to waiting episodes (create + reset run in the pool)
        with a running decode batch (backends implementing ContinuousBackend):
            every trajectory waiting for the model joins the batch now
            run ONE decode step; hand each reply that finished to its environment -- do not wait
        otherwise, if some trajectories wait for the model:
            sample one reply for every one of them in ONE backend call, hand them to their envs
        if the model had nothing to do: wait for the first environment answer (or the nearest timeout)
        collect every environment answer that is in: append its tokens, queue it for the model

A trajectory therefore continues as soon as its own environment answers, while the others are
still stepping or generating; with a running batch it does not even wait for the replies being
decoded to finish (continuous batching at the step level). Each trajectory names a backend session,
so the backend keeps its KV cache between turns and prefills only the new tokens (the engine appends
only those: templated observation + generation prompt); the session is released when the
trajectory ends. With ``synchronous=True`` the engine instead waits until every live trajectory is
ready before sampling (the anchor's round-synchronous scheme), which is the baseline
``bench/rollout.py`` compares against; ``reuse_kv_cache=False`` re-reads the history every turn.

Failures never vanish: an exception or a timeout in create/reset/step ends that trajectory with
``failed=True`` and a ``failure_reason``; the environment instance is discarded (closed once its
thread returns) and a fresh one is created for the next episode.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from agentgym_core.env import ResetResult, StepResult
from agentgym_core.rollout.backend import (
    ContinuousBackend,
    RolloutBackend,
    RunningBatch,
    Sample,
    SessionBackend,
)
from agentgym_core.rollout.chat import ChatFormat
from agentgym_core.rollout.episode import (
    EngineBase,
    EngineConfig,
    EnvSlot,
    EnvSource,
    EpisodeSpec,
    RolloutStats,
    env_error_reason,
    record_reset,
    record_step,
    server_of,
    timeout_reason,
    truncate,
)
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn

__all__ = ["EnvSource", "EpisodeSpec", "EngineConfig", "RolloutEngine", "RolloutStats"]

log = logging.getLogger(__name__)


@dataclass
class _Live:
    """Book-keeping of one trajectory in flight."""

    spec: EpisodeSpec
    traj: Trajectory
    start: float = 0.0
    slot: EnvSlot | None = None
    future: Future | None = None
    deadline: float = float("inf")
    with_system: bool = True
    pending_ids: list[int] = field(default_factory=list)  # context tokens to append before the next reply
    context_span: Span | None = None
    session: tuple[int, int, int] | None = None  # the backend's KV-cache key while the trajectory lives
    index: int = 0  # position in the run's episode list
    turn_start: float = 0.0  # when the current reply started (joined the decode batch)
    cap: int = 0  # token cap of the current reply
    actions: list[str] | None = None  # the env's available actions for the next reply (constrain_actions)
    lists_actions: bool = True  # whether the env listed any (available_actions() was not None)


class RolloutEngine(EngineBase[RolloutBackend]):
    """Runs episodes with one backend over a pool of environment instances.

    Args:
        backend: the rollout backend (owns the model and its chat template).
        make_env: creates one environment instance (an in-process ``Env`` or an ``HTTPEnv``); or a
            mapping env name -> :class:`~agentgym_core.rollout.episode.EnvSource` to play several
            environments in one run (each ``EpisodeSpec.env`` names its own; all share the model's batch).
        num_envs: M, the most environment instances alive at once (per source in the mapping form).
        config: rollout settings.
        scheduler: round scheduler; when given, ``horizon(step)`` is the turn budget.
        env_name: recorded in trajectories (default: the env class's ``name``).
    """

    def _setup(self) -> None:
        self.chat = ChatFormat(self.backend)
        self._alive = dict.fromkeys(self.sources, 0)  # instances in use or idle, per source; broken ones leave
        self._runs = 0
        self._tools_announced: set[str] = set()  # environments whose way of passing tools was logged
        self._pool = ThreadPoolExecutor(max_workers=self.config.env_workers, thread_name_prefix="agentgym-env")

    # -- public ------------------------------------------------------------------------------
    def run(
        self,
        episodes: Sequence[EpisodeSpec],
        *,
        step: int = 0,
        on_done: Callable[[Trajectory], None] | None = None,
        first_index: int = 0,
        indices: Sequence[int] | None = None,
        on_turn: Callable[[Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Roll out every episode; returns trajectories in the order of ``episodes``.

        ``on_turn`` is called after each sampled reply (its trajectory's last turn), ``on_done`` once
        per finished trajectory: progress lines move every turn (:mod:`agentgym_core.rollout.progress`).

        ``first_index`` numbers the episodes from there (``indices`` numbers each one instead): a
        continuous backend seeds each row's stream by that number (:func:`~agentgym_core.rollout.
        backend.row_seed`), so a slice of a batch rolled out elsewhere samples what it would in the
        whole. The batch seed moves on by one each run since ``stats`` was last reset (a re-run of
        failed episodes draws new streams), never by how many decode steps the timing made.
        """
        cfg = self.config
        max_turns = self._turn_budget(step)
        t0 = time.perf_counter()
        self._runs += 1
        sessions = self.config.reuse_kv_cache and isinstance(self.backend, SessionBackend)
        keys = [self._source_key(spec) for spec in episodes]  # fails early on an unknown env name
        lives = [_Live(spec, self._new_trajectory(spec, max_turns, Trajectory)) for spec in episodes]
        numbers = list(indices) if indices is not None else range(first_index, first_index + len(lives))
        if len(numbers) != len(lives) or len(set(numbers)) != len(numbers):
            raise ValueError(f"run: {len(numbers)} indices for {len(episodes)} episodes; pass one distinct index "
                             "per episode")
        by_index: dict[int, _Live] = {}
        for index, live in zip(numbers, lives, strict=True):
            live.index = index
            by_index[index] = live
            if sessions:
                live.session = (id(self), self._runs, index)
        decoder: RunningBatch | None = None
        if isinstance(self.backend, ContinuousBackend):
            sampling = cfg.sampling
            if sampling.seed is not None:  # new streams per run: fresh stats replay a run
                sampling = sampling.model_copy(update={"seed": sampling.seed + self.stats.runs})
            decoder = self.backend.open_batch(sampling)  # rows keyed by episode index: per-trajectory streams
        elif cfg.sampling.constrain_actions:
            raise ValueError(f"constrain_actions: {type(self.backend).__name__} has no running batch (open_batch) to "
                             "take each reply's available actions; use a backend that declares constrain_actions "
                             "(transformers)")
        finished = 0

        def finish(live: _Live) -> None:
            nonlocal finished
            live.traj.wall_seconds = time.perf_counter() - live.start
            self._release(live)
            self._end_session(live)
            finished += 1
            self._count(live.traj)
            if on_done is not None:
                on_done(live.traj)

        # Per source, the episodes without an environment yet (popped from the end).
        waiting: dict[str | None, list[_Live]] = {}
        for key, live in reversed(list(zip(keys, lives, strict=True))):
            waiting.setdefault(key, []).append(live)
        in_env: dict[Future, _Live] = {}
        ready: list[_Live] = []  # trajectories waiting for the model
        try:
            while finished < len(lives):
                # 1. Free environment instances go to waiting episodes; create + reset run in the pool.
                for key, queue in waiting.items():
                    idle = self._idle[key]
                    while queue and (idle or self._alive[key] < self.sources[key].num_envs):
                        live = queue.pop()
                        live.slot = idle.pop() if idle else self._new_slot(key)
                        live.start = time.perf_counter()
                        self._submit(live, self._reset_call(live), in_env)

                # 2. The model. With a running batch: ready trajectories join it (round-synchronous: only
                #    once no env call is out and the batch is empty), then ONE decode step runs and the
                #    replies that finished go to their environments. Otherwise: one call samples everyone ready.
                if decoder is not None:
                    if ready and not (cfg.synchronous and (in_env or decoder.active)):
                        for live in ready:
                            prompt, live.cap = self._open_turn(live)
                            if cfg.sampling.constrain_actions:
                                self._check_listed(live)
                                decoder.add(live.index, prompt, max_new_tokens=live.cap, session=live.session,
                                            actions=live.actions)  # type: ignore[call-arg]
                            else:
                                decoder.add(live.index, prompt, max_new_tokens=live.cap, session=live.session)
                        ready = []
                    if decoder.active:
                        t = time.perf_counter()
                        replies = decoder.step()
                        self.stats.generation_calls += 1
                        self.stats.gen_seconds += time.perf_counter() - t
                        for index, sample in replies:
                            live = by_index[index]
                            self._close_turn(live, sample, live.cap, time.perf_counter() - live.turn_start)
                            if on_turn is not None:
                                on_turn(live.traj)
                            self._after_reply(live, in_env, finish)
                    elif in_env:
                        self._wait(in_env)
                elif ready and not (cfg.synchronous and in_env):
                    batch, ready = ready, []
                    for live in self._generate(batch):
                        if on_turn is not None:
                            on_turn(live.traj)
                        self._after_reply(live, in_env, finish)
                elif in_env:
                    self._wait(in_env)

                # 3. Collect every environment answer that is in, and every deadline that passed.
                now = time.perf_counter()
                for future in [f for f, live in in_env.items() if f.done() or live.deadline <= now]:
                    live = in_env.pop(future)
                    self._collect(live, future, max_turns)
                    if live.traj.done:
                        finish(live)
                    else:
                        ready.append(live)
        finally:  # an error must not leave KV caches behind in the backend
            if decoder is not None:
                decoder.close()
            for live in lives:
                self._end_session(live)
        self.stats.wall_seconds += time.perf_counter() - t0
        self.stats.runs += 1
        return [live.traj for live in lives]

    def _after_reply(self, live: _Live, in_env: dict[Future, _Live], finish: Callable[[_Live], None]) -> None:
        """A reply is in: end the trajectory if it is over, else hand the reply to its environment."""
        if live.traj.done:
            finish(live)
        else:
            self._submit(live, self._step_call(live), in_env)

    @staticmethod
    def _wait(in_env: dict[Future, _Live]) -> None:
        """Block until the first environment answer or the nearest deadline."""
        timeout = max(0.0, min(live.deadline for live in in_env.values()) - time.perf_counter())
        wait(list(in_env), timeout=timeout, return_when=FIRST_COMPLETED)

    # -- environment side (runs in the pool) ------------------------------------------------------
    def _new_slot(self, key: str | None) -> EnvSlot:
        self._alive[key] += 1
        return EnvSlot(source=key)

    def _reset_call(self, live: _Live) -> Callable[[], tuple[str, list[dict] | None, ResetResult, float]]:
        slot, spec = live.slot, live.spec
        assert slot is not None

        def call() -> tuple[str, list[dict] | None, ResetResult, float]:
            t = time.perf_counter()
            instruction, tools, result = self._reset_env(slot, spec)
            assert slot.env is not None
            self._read_actions(live, slot.env)
            return instruction, tools, result, time.perf_counter() - t

        return call

    def _step_call(self, live: _Live) -> Callable[[], tuple[str, StepResult, float]]:
        # The reply as the model said it: its message content, without the end-of-turn token that
        # turns[-1].text keeps (an action "turn left<|im_end|>" would be invalid).
        slot, text = live.slot, live.traj.messages[-1]["content"]
        assert slot is not None and slot.env is not None
        env = slot.env

        def call() -> tuple[str, StepResult, float]:
            t = time.perf_counter()
            action = env.parse_action(text)
            result = env.step(action)
            if not (result.terminated or result.truncated):
                self._read_actions(live, env)
            return action, result, time.perf_counter() - t

        return call

    def _check_listed(self, live: _Live) -> None:
        if not live.lists_actions:
            env = live.traj.env or self.env_name or "the environment"
            raise ValueError(f"constrain_actions: {env} lists no available actions (available_actions() returned "
                             "None), so there is nothing to constrain its replies to; turn rollout.constrain_actions "
                             "off for it")

    def _read_actions(self, live: _Live, env: Any) -> None:
        """With constrain_actions: the env's available actions for the next reply (in the env's thread)."""
        if not self.config.sampling.constrain_actions:
            return
        actions = env.available_actions()
        live.actions = None if actions is None else [str(a) for a in actions]
        live.lists_actions = actions is not None

    def _submit(self, live: _Live, call: Callable[[], Any], in_env: dict[Future, _Live]) -> None:
        future = self._pool.submit(call)
        deadline = time.perf_counter() + self.config.step_timeout_s
        if self.config.episode_timeout_s is not None:
            deadline = min(deadline, live.start + self.config.episode_timeout_s)
        live.future, live.deadline = future, deadline
        in_env[future] = live

    def _collect(self, live: _Live, future: Future, max_turns: int) -> None:
        """Fold one environment answer (or its failure / timeout) into the trajectory."""
        traj, cfg = live.traj, self.config
        if not future.done():
            episode_over = cfg.episode_timeout_s is not None and time.perf_counter() >= live.start + cfg.episode_timeout_s
            self._fail(live, timeout_reason(cfg, episode_over=episode_over), running=future)
            return
        error = future.exception()
        if error is not None:
            self._fail(live, env_error_reason("reset" if not traj.turns else "step", error))
            return
        if not traj.turns:  # reset answered
            instruction, tools, reset, seconds = future.result()
            if tools:
                self._announce_tools(traj.env or self.env_name or "")
            record_reset(traj, instruction, reset.observation, seconds=seconds, env_name=self.env_name,
                         instruction_role=cfg.instruction_role, info=reset.info, tools=tools,
                         native_tools=bool(tools) and self.chat.renders_tools)
            live.with_system = cfg.instruction_role == "system"
            live.pending_ids = self.chat.prompt_ids(traj.messages, traj.tools)
            if len(live.pending_ids) >= cfg.max_total_tokens:
                truncate(traj, "token_budget")
            return
        action, result, seconds = future.result()
        if record_step(traj, action, result, seconds, max_turns,
                       end_on_invalid=cfg.end_on_invalid_action):
            span = traj.turns[-1].action_span
            live.pending_ids = self.chat.turn_ids(
                traj.token_ids[span.start:span.end], result.observation, with_system=live.with_system,
                tools=traj.tools,
            )
            if len(traj.token_ids) + len(live.pending_ids) >= cfg.max_total_tokens:
                truncate(traj, "token_budget")

    def _announce_tools(self, env: str) -> None:
        """Log once per environment how its tools reach the model (native ``tools=`` or the system message)."""
        if env in self._tools_announced:
            return
        self._tools_announced.add(env)
        if self.chat.renders_tools:
            log.info("%s: tool calls are native: the schemas go through the chat template's tools=", env)
        else:
            log.info("%s: tool calls fall back to the system message (%s), so the schemas are described in the "
                     "instruction", env, self.chat.tools_fallback_reason)

    # -- model side (runs in the calling thread) -------------------------------------------------
    def _open_turn(self, live: _Live) -> tuple[list[int], int]:
        """Append the pending context tokens (mask 0); returns (prompt, token cap) for the next reply."""
        traj, start = live.traj, len(live.traj.token_ids)
        traj.token_ids.extend(live.pending_ids)
        traj.loss_mask.extend([0] * len(live.pending_ids))
        traj.logprobs.extend([0.0] * len(live.pending_ids))
        live.pending_ids = []
        live.context_span = Span(start=start, end=len(traj.token_ids))
        if not traj.turns:
            traj.prompt_length = len(traj.token_ids)
        live.turn_start = time.perf_counter()
        return traj.token_ids, self.config.max_total_tokens - len(traj.token_ids)

    def _close_turn(self, live: _Live, sample: Sample, cap: int, seconds: float) -> None:
        """Append a sampled reply (mask 1, its log-probs) as a new turn."""
        cfg, traj, start = self.config, live.traj, len(live.traj.token_ids)
        traj.token_ids.extend(sample.token_ids)
        traj.loss_mask.extend([1] * len(sample.token_ids))
        traj.logprobs.extend(sample.logprobs)
        self.stats.sampled_tokens += len(sample.token_ids)
        budget_hit = (sample.finish_reason == "length" and cap < cfg.sampling.max_new_tokens
                      and len(sample.token_ids) >= cap)
        traj.turns.append(Turn(
            index=len(traj.turns), context_span=live.context_span,
            action_span=Span(start=start, end=len(traj.token_ids)),
            text=self.backend.decode(sample.token_ids), action="",
            finish_reason="token_budget" if budget_hit else sample.finish_reason,
            reward_index=len(traj.token_ids) - 1, gen_seconds=seconds,
        ))
        traj.gen_seconds += seconds
        traj.messages.append({"role": "assistant", "content": self.chat.reply_content(sample.token_ids)})
        if cfg.episode_timeout_s is not None and time.perf_counter() > live.start + cfg.episode_timeout_s:
            self._fail(live, timeout_reason(cfg, episode_over=True))

    def _generate(self, batch: list[_Live]) -> list[_Live]:
        """One backend call samples a reply for every trajectory in ``batch`` (backends without open_batch)."""
        sampling = self.config.sampling
        prompts, caps = zip(*(self._open_turn(live) for live in batch), strict=True)
        t = time.perf_counter()
        if sampling.seed is not None:  # a new stream per call; the same config seed replays the run
            sampling = sampling.model_copy(update={"seed": sampling.seed + self.stats.generation_calls})
        if batch[0].session is not None:
            samples = self.backend.generate(  # type: ignore[call-arg]
                prompts, sampling, max_new_tokens=caps, sessions=[live.session for live in batch]
            )
        else:
            samples = self.backend.generate(prompts, sampling, max_new_tokens=caps)
        seconds = time.perf_counter() - t
        self.stats.generation_calls += 1
        self.stats.gen_seconds += seconds
        for live, sample, cap in zip(batch, samples, caps, strict=True):
            self._close_turn(live, sample, cap, seconds)
        return batch

    # -- endings ---------------------------------------------------------------------------------
    def _end_session(self, live: _Live) -> None:
        """Free the trajectory's KV cache in the backend (once)."""
        if live.session is not None:
            self.backend.release_session(live.session)  # type: ignore[attr-defined]
            live.session = None

    def _fail(self, live: _Live, reason: str, running: Future | None = None) -> None:
        live.traj.failed, live.traj.failure_reason = True, reason
        if live.slot is not None:
            live.traj.failed_server = server_of(live.slot.env)
            live.slot.broken = True
            if running is not None:  # the call still runs in its thread: close once it returns
                slot = live.slot
                running.add_done_callback(lambda _f: slot.close())

    def _release(self, live: _Live) -> None:
        slot, live.slot = live.slot, None
        if slot is None:
            return
        if slot.broken:
            self._alive[slot.source] -= 1
            if live.future is None or live.future.done():
                slot.close()
        else:
            self._idle[slot.source].append(slot)
