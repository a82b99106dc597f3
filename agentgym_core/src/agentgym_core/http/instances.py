"""The live environment instances an environment server holds.

Instance ids are random integers (below 2**53, so JavaScript clients keep them exact), never
counters: a client that still holds an id from before a server restart gets a clear 404 instead
of silently stepping another client's episode. Creation can be made idempotent with a
client-chosen request id (see :meth:`InstanceTable.create`), so a client may retry a create whose
answer it never received without leaving an orphan instance behind.

Thread-safety: the table's own lock guards the id -> instance map and is never held while an
environment runs; each instance has its own lock so that concurrent calls on one instance are
serialised while calls on different instances proceed in parallel.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym_core.env import Env, EpisodeEndedError, ResetResult, StepResult

ID_LIMIT = 2**53  # ids stay exact in every JSON implementation (IEEE doubles)

log = logging.getLogger(__name__)


class UnknownInstanceError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class AtCapacityError(RuntimeError):
    pass


class RequestIdReusedError(ValueError):
    """A create repeated a ``request_id`` with a different request (a new task, seed or env)."""


class NoEpisodeError(RuntimeError):
    pass


def safe_text(text: str) -> str:
    """``text`` with lone surrogates replaced, so it can always be sent as UTF-8 JSON."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


@dataclass
class Instance:
    instance_id: int
    env: Env
    serial: int = 0  # 0 for the first instance this table created, 1 for the next, ...
    task_id: int | None = None
    observation: str = ""
    done: bool = False
    closed: bool = False
    score: float = 0.0  # cumulative reward, for AgentGym-compatible responses
    request_id: str | None = None  # the client's id for the create request, if it sent one
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, task_id: int, seed: int | None) -> ResetResult:
        result = self.env.reset(task_id, seed)
        result.observation = safe_text(result.observation)
        self.task_id, self.observation, self.done, self.score = task_id, result.observation, False, 0.0
        return result

    def step(self, action: str, *, after_done: bool = False) -> StepResult:
        """Step the episode; ``after_done`` lets an environment that allows it go on past the end."""
        if self.task_id is None:
            raise NoEpisodeError(f"instance {self.instance_id} has no episode yet: reset it onto a task first")
        if self.done and not after_done:
            raise EpisodeEndedError(
                f"the episode of instance {self.instance_id} (task {self.task_id}) has ended; "
                "reset it to start another"
            )
        result = self.env.step(action)
        # An observation that cannot be encoded would fail the answer after the step was applied
        # and keep failing every later read of it; store and answer a sendable one instead.
        result.observation = safe_text(result.observation)
        self.observation, self.done = result.observation, self.done or result.done
        self.score += result.reward
        return result


class InstanceTable:
    """Creates, finds, expires and closes instances of one environment class."""

    def __init__(self, make_env: Callable[[], Env], *, max_instances: int, idle_ttl_s: float | None,
                 shard: tuple[int, int] = (0, 1), next_serial: Callable[[], int] | None = None) -> None:
        """``shard=(k, n)``: this table is worker k of n, and every id it hands out is ``k`` modulo
        ``n`` (so a front can tell the owner from the id). ``next_serial`` numbers creations when
        several tables share one count (workers of one server); default: this table's own count."""
        index, count = shard
        if not (isinstance(count, int) and count >= 1 and isinstance(index, int) and 0 <= index < count):
            raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard!r}")
        if max_instances < 1:
            raise ValueError(f"max_instances must be at least 1, got {max_instances}")
        if idle_ttl_s is not None and not idle_ttl_s > 0:
            raise ValueError(f"idle_ttl_s must be a positive number of seconds or None (never), got {idle_ttl_s}")
        self._make_env = make_env
        self.max_instances = max_instances
        self.idle_ttl_s = idle_ttl_s
        self._instances: dict[int, Instance] = {}
        self._reserved = 0  # slots taken by creations in progress
        self._serial = 0
        self._next_serial = next_serial
        self.shard = shard
        self._by_request: dict[str, _Creation] = {}  # client request id -> its creation
        self._lock = threading.Lock()
        self.lost_note = ""
        """Appended to unknown-instance messages (a restarted worker says its instances were lost)."""

    def __len__(self) -> int:
        with self._lock:
            return len(self._instances)

    def create(
        self,
        setup: Callable[[Instance], Any] | None = None,
        *,
        request_id: str | None = None,
        request: Any = None,
        make_env: Callable[[], Env] | None = None,
    ) -> tuple[Instance, Any]:
        """Create an instance, run ``setup(instance)`` on it, and only then publish it.

        If ``setup`` raises, the instance is closed and never becomes visible, so a failed first
        reset cannot hold a slot. With ``request_id``, a repeat of the same request (a client's
        retry) answers the first one's instance and setup result instead of creating another;
        a repeat that arrives while the first is still running waits for it. ``request`` is what
        the create asked for (task, seed, ...): a repeat of the id that asks for something else
        raises :class:`RequestIdReusedError` instead of answering another request's instance.

        Returns ``(instance, setup result)``.
        """
        if request_id is not None:
            with self._lock:
                earlier = self._by_request.get(request_id)
                if earlier is None:
                    self._by_request[request_id] = creation = _Creation(request)
            if earlier is not None:
                if earlier.request != request:
                    raise RequestIdReusedError(
                        f"request_id {request_id!r:.80} was already used by a create that asked for "
                        f"{_describe(earlier.request)}, not {_describe(request)}; send a fresh request_id (e.g. a "
                        "new UUID) for every new instance, and repeat one only to retry the same create")
                return earlier.outcome()
            try:
                creation.result = self._create(setup, make_env)
            except BaseException as exc:
                creation.error = exc
                with self._lock:
                    self._by_request.pop(request_id, None)  # a failed create may be retried for real
                raise
            finally:
                creation.done.set()
            creation.result[0].request_id = request_id
            return creation.result
        return self._create(setup, make_env)

    def _create(self, setup: Callable[[Instance], Any] | None, make_env: Callable[[], Env] | None
                ) -> tuple[Instance, Any]:
        with self._lock:
            if len(self._instances) + self._reserved >= self.max_instances:
                raise AtCapacityError(
                    f"the server holds its maximum of {self.max_instances} live instances; close some "
                    "or start the server with a larger --max-instances"
                )
            self._reserved += 1
            serial, self._serial = self._serial, self._serial + 1
        if self._next_serial is not None:
            serial = self._next_serial()
        try:
            env = (make_env or self._make_env)()
            instance = Instance(self._new_id(), env, serial)
            try:
                result = setup(instance) if setup is not None else None
            except BaseException:
                self._close(instance)
                raise
            with self._lock:
                self._instances[instance.instance_id] = instance
        finally:
            with self._lock:
                self._reserved -= 1
        return instance, result

    def _new_id(self) -> int:
        index, count = self.shard
        while True:
            candidate = secrets.randbelow((ID_LIMIT - 1) // count) * count + index
            if candidate == 0:
                continue
            with self._lock:
                if candidate not in self._instances:
                    return candidate

    def get(self, instance_id: int) -> Instance:
        with self._lock:
            instance = self._instances.get(instance_id)
        if instance is None:
            raise UnknownInstanceError(
                f"no live instance {instance_id}: it was never created, was closed, or expired after "
                f"{self.idle_ttl_s} s idle{self.lost_note}"
            )
        instance.last_used = time.monotonic()
        return instance

    def run(self, instance_id: int, fn: Callable[[Instance], Any]) -> Any:
        """Run ``fn(instance)`` holding the instance's lock (one call at a time per instance)."""
        instance = self.get(instance_id)
        with instance.lock:
            if instance.closed:  # closed while we waited for the lock
                raise UnknownInstanceError(f"instance {instance_id} was closed")
            try:
                return fn(instance)
            finally:
                instance.last_used = time.monotonic()

    def close(self, instance_id: int) -> None:
        with self._lock:
            instance = self._instances.pop(instance_id, None)
            self._forget_request(instance)
        if instance is None:
            raise UnknownInstanceError(f"no live instance {instance_id} to close{self.lost_note}")
        self._close(instance)

    def _forget_request(self, instance: Instance | None) -> None:
        """Drop the request id of a closed instance (call with the table lock held)."""
        if instance is not None and instance.request_id is not None:
            self._by_request.pop(instance.request_id, None)

    def _close(self, instance: Instance) -> None:
        with instance.lock:
            instance.closed = True
            try:
                instance.env.close()
            except Exception:  # closing must free the slot even when the env's close fails
                log.exception("closing instance %s failed", instance.instance_id)

    def reap_idle(self) -> int:
        """Close instances idle longer than the TTL; returns how many were closed."""
        if self.idle_ttl_s is None:
            return 0
        deadline = time.monotonic() - self.idle_ttl_s
        with self._lock:
            stale = [i for i in self._instances.values() if i.last_used < deadline and not i.lock.locked()]
            for instance in stale:
                del self._instances[instance.instance_id]
                self._forget_request(instance)
        for instance in stale:
            log.info("closing instance %s after %.0f s idle", instance.instance_id, self.idle_ttl_s)
            self._close(instance)
        return len(stale)

    def close_all(self) -> None:
        with self._lock:
            instances = list(self._instances.values())
            self._instances.clear()
            self._by_request.clear()
        for instance in instances:
            self._close(instance)


def _describe(request: Any) -> str:
    if isinstance(request, dict):
        return ", ".join(f"{k}={v!r:.40}" for k, v in request.items()) or "nothing in particular"
    return repr(request)


class _Creation:
    """One create request in progress or done, for answering its retries."""

    def __init__(self, request: Any = None) -> None:
        self.request = request
        self.done = threading.Event()
        self.result: tuple[Instance, Any] | None = None
        self.error: BaseException | None = None

    def outcome(self) -> tuple[Instance, Any]:
        self.done.wait()
        if self.result is None:
            raise self.error if self.error is not None else RuntimeError("create failed")
        instance, _ = self.result
        if instance.closed:
            raise UnknownInstanceError(f"instance {instance.instance_id} of this request was already closed")
        return self.result
