"""The live environment instances an environment server holds.

Thread-safety: the table's own lock guards the id -> instance map and is never held while an
environment runs; each instance has its own lock so that concurrent calls on one instance are
serialised while calls on different instances proceed in parallel.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym_core.env import Env, EpisodeEndedError, ResetResult, StepResult

log = logging.getLogger(__name__)


class UnknownInstanceError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class AtCapacityError(RuntimeError):
    pass


class NoEpisodeError(RuntimeError):
    pass


@dataclass
class Instance:
    instance_id: int
    env: Env
    task_id: int | None = None
    observation: str = ""
    done: bool = False
    closed: bool = False
    score: float = 0.0  # cumulative reward, for AgentGym-compatible responses
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, task_id: int, seed: int | None) -> ResetResult:
        result = self.env.reset(task_id, seed)
        self.task_id, self.observation, self.done, self.score = task_id, result.observation, False, 0.0
        return result

    def step(self, action: str) -> StepResult:
        if self.task_id is None:
            raise NoEpisodeError(f"instance {self.instance_id} has no episode yet: reset it onto a task first")
        if self.done:
            raise EpisodeEndedError(
                f"the episode of instance {self.instance_id} (task {self.task_id}) has ended; "
                "reset it to start another"
            )
        result = self.env.step(action)
        self.observation, self.done = result.observation, result.done
        self.score += result.reward
        return result


class InstanceTable:
    """Creates, finds, expires and closes instances of one environment class."""

    def __init__(self, make_env: Callable[[], Env], *, max_instances: int, idle_ttl_s: float | None) -> None:
        self._make_env = make_env
        self.max_instances = max_instances
        self.idle_ttl_s = idle_ttl_s
        self._instances: dict[int, Instance] = {}
        self._reserved = 0  # slots taken by creations in progress
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._instances)

    def create(self) -> Instance:
        with self._lock:
            if len(self._instances) + self._reserved >= self.max_instances:
                raise AtCapacityError(
                    f"the server holds its maximum of {self.max_instances} live instances; close some "
                    "or start the server with a larger --max-instances"
                )
            self._reserved += 1
        try:
            env = self._make_env()
        finally:
            with self._lock:
                self._reserved -= 1
        with self._lock:
            instance = Instance(next(self._ids), env)
            self._instances[instance.instance_id] = instance
        return instance

    def get(self, instance_id: int) -> Instance:
        with self._lock:
            instance = self._instances.get(instance_id)
        if instance is None:
            raise UnknownInstanceError(
                f"no live instance {instance_id}: it was never created, was closed, or expired after "
                f"{self.idle_ttl_s} s idle"
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
        if instance is None:
            raise UnknownInstanceError(f"no live instance {instance_id} to close")
        self._close(instance)

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
        for instance in stale:
            log.info("closing instance %s after %.0f s idle", instance.instance_id, self.idle_ttl_s)
            self._close(instance)
        return len(stale)

    def close_all(self) -> None:
        with self._lock:
            instances = list(self._instances.values())
            self._instances.clear()
        for instance in instances:
            self._close(instance)
