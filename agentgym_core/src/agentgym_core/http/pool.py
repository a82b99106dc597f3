"""Several servers of one environment behind one client: placement, failover and per-server counts.

``EnvPool(urls, env=...)`` stands for N ``agentgym serve`` processes of the same environment.
``pool.make_env()`` returns a :class:`PooledEnv`, an :class:`~agentgym_core.http.client.HTTPEnv` whose
instance is created on the healthy server with the fewest of this pool's live instances (relative
to the server's ``max_instances``; ties go round-robin). What happens when a server stops answering:

* the call that noticed it (connection refused, reset, or no answer within the client's timeout)
  marks the server **down**: no new instance goes there; after ``probe_interval_s`` the next
  placement asks its ``/health`` once, and an answer brings it back;
* a **reset** moves to another server: the episode has not started, so nothing is lost (the
  dead server's instance is forgotten);
* a **step** cannot move (the episode's state lived on the dead server): it raises
  :class:`~agentgym_core.http.client.ServerUnreachableError`, the rollout engine marks that trajectory
  ``failed``, the trainer counts it (``infra_failed``) and leaves it out of the loss, and the
  rollout worker samples the episode again on a healthy server, up to ``rollout.rerun_failed`` times;
* with every server down, placement probes them all at once and, if none answers, raises an error
  that names each URL.

The counters behind the per-server metrics (instances created, steps, errors, down) are kept
here; :meth:`EnvPool.snapshot` reads them. Thread-safe: the engine calls it from its env threads.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from agentgym_core.env import EnvError, ResetResult, StepResult, TaskCatalog
from agentgym_core.http.client import EnvClient, HTTPEnv, RemoteError, ServerUnreachableError
from agentgym_core.http.protocol import EnvInfo

__all__ = ["EnvPool", "NoHealthyServerError", "PooledEnv", "ServerCounts"]


class NoHealthyServerError(EnvError):
    """Every server of a pool is down (none answered its health probe)."""


@dataclass
class ServerCounts:
    """What one server of a pool did so far (cumulative; diff two snapshots for a step's share)."""

    url: str
    live: int = 0  # this pool's instances on it now
    created: int = 0  # instances placed on it (a create it then failed included)
    steps: int = 0  # steps it answered
    errors: int = 0  # calls it failed to answer (each marks it down)
    down: bool = False
    capacity: int = 1  # its max_instances, as its /health said (1 until known)


@dataclass
class _Server:
    client: EnvClient
    prober: EnvClient  # health checks only: a short timeout and no retries, so a probe never blocks long
    counts: ServerCounts
    retry_at: float = 0.0  # when a down server may be probed again
    probing: bool = False
    order: int = 0  # placement tie-break


class EnvPool:
    """N servers of environment ``env``; see the module docstring.

    Args:
        urls: the servers' base URLs (at least one, no duplicates).
        env: the environment's name (each server's ``/health`` must say the same).
        timeout: seconds for one request (a server silent for longer is marked down).
        probe_interval_s: seconds a down server is left alone before its health is asked again.
        probe_timeout_s: seconds a health probe waits for its answer.
        token: the servers' shared token (``agentgym serve --token``); default: $AGENTGYM_TOKEN.
    """

    def __init__(self, urls: list[str], *, env: str, timeout: float = 60.0, probe_interval_s: float = 5.0,
                 probe_timeout_s: float = 5.0, token: str | None = None) -> None:
        if not urls:
            raise ValueError(f"an environment pool needs at least one server URL for {env!r}")
        stripped = [u.rstrip("/") for u in urls]
        if len(set(stripped)) != len(stripped):
            duplicate = next(u for u in stripped if stripped.count(u) > 1)
            raise ValueError(f"{env!r} lists the server {duplicate} twice; each URL once (a server is one entry)")
        self.env = env
        self.probe_interval_s = probe_interval_s
        probe_timeout = min(timeout, probe_timeout_s)
        self._servers = [
            _Server(EnvClient(u, timeout=timeout, token=token),
                    EnvClient(u, timeout=probe_timeout, retries=0, pool_size=1, token=token),
                    ServerCounts(u), order=i)
            for i, u in enumerate(stripped)
        ]
        self._lock = threading.Lock()
        self._turn = 0
        self._info: EnvInfo | None = None

    # -- setup -----------------------------------------------------------------------------------
    def check(self) -> TaskCatalog:
        """Ask every server who it is; return the shared task catalog.

        A server that does not answer starts down (the run goes on with the others); one that
        serves another environment, or another catalog, is a configuration error. Raises
        :class:`NoHealthyServerError` when none answers.
        """
        catalog: TaskCatalog | None = None
        first_url = ""
        unreachable: list[str] = []
        for server in self._servers:
            try:
                health = server.prober.health()  # a silent server costs probe_timeout_s here, not timeout
                theirs = server.client.tasks()
            except ServerUnreachableError as exc:
                self._mark_down(server)
                unreachable.append(str(exc))
                continue
            if health.env != self.env:
                raise ValueError(f"the server at {server.counts.url} serves {health.env!r}, not {self.env!r}; "
                                 f"fix this entry of envs[].urls (or the env name)")
            server.counts.capacity = max(1, health.max_instances)
            if catalog is None:
                catalog, first_url = theirs, server.counts.url
            elif theirs.splits != catalog.splits:
                raise ValueError(f"the {self.env!r} servers at {first_url} and {server.counts.url} offer different "
                                 "task catalogs; serve the same data (and env options) on every server of a pool")
        if catalog is None:
            raise NoHealthyServerError(f"none of the {len(self._servers)} servers of {self.env!r} answered: "
                                       + "; ".join(unreachable))
        return catalog

    # -- placement -------------------------------------------------------------------------------
    def make_env(self) -> PooledEnv:
        """A new environment handle; its instance is placed when it is first reset."""
        return PooledEnv(self)

    def place(self, avoid: EnvClient | None = None) -> EnvClient:
        """The client of the server a new instance should go to (counted as live there until released).

        Least loaded among the healthy ones, ``avoid`` last; down servers past their probe time are
        probed first; with none healthy, all are probed, and :class:`NoHealthyServerError` if none answers.
        """
        self._probe_due(force=False)
        chosen = self._least_loaded(avoid)
        if chosen is None:
            self._probe_due(force=True)
            chosen = self._least_loaded(avoid)
        if chosen is None:
            raise NoHealthyServerError(
                f"every server of {self.env!r} is down ({', '.join(s.counts.url for s in self._servers)}); "
                "start them again (`agentgym serve`) or fix envs[].urls")
        return chosen.client

    def _least_loaded(self, avoid: EnvClient | None) -> _Server | None:
        with self._lock:
            healthy = [s for s in self._servers if not s.counts.down]
            if not healthy:
                return None
            self._turn += 1
            n = len(self._servers)

            def load(s: _Server) -> tuple[bool, float, int]:
                return s.client is avoid, s.counts.live / s.counts.capacity, (s.order - self._turn) % n

            chosen = min(healthy, key=load)
            chosen.counts.live += 1
            chosen.counts.created += 1
            return chosen

    def _probe_due(self, *, force: bool) -> None:
        """Ask each down server whose wait is over (all down ones when ``force``) whether it is back."""
        now = time.monotonic()
        with self._lock:
            due = [s for s in self._servers if s.counts.down and not s.probing and (force or s.retry_at <= now)]
            for server in due:
                server.probing = True
        for server in due:
            try:
                health = server.prober.health()
            except EnvError:
                back = False
            else:
                back = health.env == self.env
                server.counts.capacity = max(1, health.max_instances)
            with self._lock:
                server.probing = False
                if back:
                    server.counts.down = False
                else:
                    server.retry_at = time.monotonic() + self.probe_interval_s

    # -- what the environments report ------------------------------------------------------------
    def release(self, client: EnvClient) -> None:
        """An instance placed on ``client``'s server is gone (closed, or abandoned with its server)."""
        with self._lock:
            server = self._server(client)
            server.counts.live = max(0, server.counts.live - 1)

    def record_step(self, client: EnvClient) -> None:
        with self._lock:
            self._server(client).counts.steps += 1

    def record_unreachable(self, client: EnvClient) -> None:
        """``client``'s server did not answer: count the error and mark it down."""
        with self._lock:
            server = self._server(client)
            server.counts.errors += 1
            self._mark_down(server)

    def _mark_down(self, server: _Server) -> None:
        server.counts.down = True
        server.retry_at = time.monotonic() + self.probe_interval_s

    def _server(self, client: EnvClient) -> _Server:
        return next(s for s in self._servers if s.client is client)

    # -- reading ---------------------------------------------------------------------------------
    def info(self) -> EnvInfo:
        """The environment's info (instruction, ...), from the first server that answers; asked once."""
        with self._lock:
            if self._info is not None:
                return self._info
        errors: list[str] = []
        for server in self._servers:
            try:
                info = server.client.info()
            except ServerUnreachableError as exc:
                errors.append(str(exc))
                continue
            with self._lock:
                self._info = info
            return info
        raise NoHealthyServerError(f"no server of {self.env!r} answered /info: " + "; ".join(errors))

    @property
    def clients(self) -> list[EnvClient]:
        return [s.client for s in self._servers]

    def healthy_client(self) -> EnvClient:
        """A client of a server not marked down (for catalog and info calls)."""
        with self._lock:
            up = [s for s in self._servers if not s.counts.down]
        return (up or self._servers)[0].client

    def snapshot(self) -> list[ServerCounts]:
        """A copy of every server's counts, in the order of ``urls``."""
        with self._lock:
            return [ServerCounts(**vars(s.counts)) for s in self._servers]

    def close(self) -> None:
        for server in self._servers:
            server.client.close()
            server.prober.close()


class PooledEnv(HTTPEnv):
    """An :class:`HTTPEnv` whose server the pool picks; a reset moves off a dead server, a step cannot."""

    def __init__(self, pool: EnvPool) -> None:
        super().__init__(client=pool.healthy_client(), env=pool.env)
        self.pool = pool
        self._placed = False  # True while an instance of ours counts as live on self.client's server

    @property
    def instruction(self) -> str:
        return self.pool.info().instruction

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.pool.info().tools

    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        # One try per server: a dead one is marked down and a full one avoided, so the next placement
        # goes elsewhere. Moving is safe here: the episode starts with this call.
        avoid: EnvClient | None = None
        for _attempt in range(len(self.pool.clients) + 1):  # the last placement raises if all are down
            if not self._placed:
                self.client = self.pool.place(avoid=avoid)
                self.instance_id, self._placed = None, True
            try:
                return super().reset(task_id, seed)
            except ServerUnreachableError:
                self._abandon()
            except RemoteError as exc:
                # Full (503 at_capacity on create), or restarted without our instance (404 on reset, or
                # 503 worker_lost while the worker of `--workers N` that held it restarts).
                if exc.code not in ("at_capacity", "unknown_instance", "worker_lost"):
                    raise
                avoid = self.client
                self._abandon(down=False)
        raise NoHealthyServerError(f"no server of {self.pool.env!r} could start an episode: each one was down, "
                                   "full, or lost the instance; see the per-server errors in the run's metrics")

    def step(self, action: str) -> StepResult:
        try:
            result = super().step(action)
        except ServerUnreachableError:
            self._abandon()
            raise
        self.pool.record_step(self.client)
        return result

    def parse_action(self, text: str) -> str:
        try:
            return super().parse_action(text)
        except ServerUnreachableError:
            self._abandon()
            raise

    def _abandon(self, *, down: bool = True) -> None:
        """Forget the instance on the current server (marking the server down unless ``down`` is False)."""
        if down:
            self.pool.record_unreachable(self.client)
        if self._placed:
            self.pool.release(self.client)
            self._placed = False
        self.instance_id = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._placed:
                self.pool.release(self.client)
                self._placed = False
