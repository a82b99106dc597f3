"""One ScienceWorld JVM, driven through py4j's lower-level interface, and a pool that reuses them.

Why not ``scienceworld.ScienceWorldEnv``: its ``step()`` asks the JVM for the full list of valid
action/object combinations on every call (~10 ms and hundreds of strings), which caps an episode at
~30 steps/s. :class:`Simulator` calls the Scala ``PythonInterface`` directly: a step is the action
plus three scalar reads (score, completed, moves), and valid actions are computed only when asked.

Memory: the JVM's default heap grows past 2 GB per simulator; :func:`java_options` caps it
(``-Xmx512m`` by default, which holds a JVM near 480 MB at the same speed) unless the user's own
``JAVA_TOOL_OPTIONS`` already sets a heap. Long-lived JVMs are recycled after a number of episodes or
above an RSS threshold (see :meth:`Simulator.needs_recycling`); switching task with ``load`` on a
warm JVM costs 15-150 ms, against ~0.6-2.5 s for a fresh JVM, so :class:`SimulatorPool` keeps closed
simulators warm for the next environment instance.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import threading
from typing import Any

from agentgym_core import EnvError

log = logging.getLogger(__name__)

__all__ = ["Simulator", "SimulatorDiedError", "SimulatorPool", "java_options", "process_rss_mb"]


class SimulatorDiedError(EnvError):
    """The JVM under an environment instance exited or stopped answering."""


def java_options(heap: str | None) -> list[str]:
    """JVM options for a simulator: a heap cap unless the user already chose one.

    A user's ``JAVA_TOOL_OPTIONS`` is read by every JVM we start (it is inherited), so when it
    already carries ``-Xmx`` we add nothing and theirs wins.
    """
    if not heap or "-Xmx" in os.environ.get("JAVA_TOOL_OPTIONS", ""):
        return []
    return [f"-Xmx{heap}"]


def process_rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MiB, from /proc (None where /proc is unavailable)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class Simulator:
    """One JVM running the ScienceWorld engine, with one loaded task at a time.

    Every call goes to the JVM over a local socket; a dead JVM turns any call into
    :class:`SimulatorDiedError` that names the process and says how to recover.
    """

    def __init__(self, *, heap: str | None = "512m", jar_path: str | None = None) -> None:
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from scienceworld.constants import BASEPATH, JAR_PATH

        java = shutil.which("java")
        if java is None:
            raise EnvError(
                "ScienceWorld needs a Java runtime (17 or newer) and no `java` is on PATH; install one "
                "(Debian/Ubuntu: `apt-get install -y openjdk-17-jre-headless`) and retry"
            )
        self.heap = heap
        self.episodes = 0  # loads since this JVM started, for recycling
        port, self._proc = launch_gateway(
            classpath=jar_path or JAR_PATH, javaopts=java_options(heap), die_on_exit=True,
            cwd=BASEPATH, return_proc=True, java_path=java,
        )
        self._gateway = JavaGateway(
            gateway_parameters=GatewayParameters(auto_field=True, port=port), java_process=self._proc
        )
        self._server = self._gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        self._closed = False
        log.info("started ScienceWorld JVM pid %s (heap cap %s)", self.pid, heap or "JVM default")

    # -- process -------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None

    def rss_mb(self) -> float | None:
        """Resident memory of this JVM in MiB."""
        return process_rss_mb(self.pid)

    def needs_recycling(self, *, max_episodes: int | None, max_rss_mb: float | None) -> bool:
        """Whether this JVM has served enough episodes or grown enough to be replaced."""
        if max_episodes is not None and self.episodes >= max_episodes:
            return True
        if max_rss_mb is not None:
            rss = self.rss_mb()
            if rss is not None and rss > max_rss_mb:
                return True
        return False

    def close(self) -> None:
        """Stop the JVM; idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # the JVM may already be gone; we only need it stopped
            self._gateway.shutdown()
        try:
            if self._proc.stdin:
                self._proc.stdin.close()  # die_on_exit: the JVM exits when its stdin closes
            self._proc.wait(timeout=5)
        except Exception:
            self._proc.kill()
            self._proc.wait(timeout=5)

    # -- engine calls ----------------------------------------------------------------------------
    def _call(self, method: str, *args: Any) -> Any:
        from py4j.protocol import Py4JError

        if self._closed:
            raise SimulatorDiedError("this ScienceWorld simulator was closed; reset the environment to start another")
        try:
            return getattr(self._server, method)(*args)
        except Py4JError as exc:
            code = self._proc.poll()
            if code is not None:
                raise SimulatorDiedError(
                    f"the ScienceWorld JVM (pid {self.pid}) exited with code {code} during {method}(); "
                    "this episode is lost - reset the environment to start a fresh simulator"
                ) from exc
            raise SimulatorDiedError(
                f"the ScienceWorld JVM (pid {self.pid}) failed during {method}(): {exc}; "
                "reset the environment to start a fresh simulator"
            ) from exc

    def load(self, task_name: str, variation: int, *, gold_path: bool = False) -> None:
        """Load a task variation (a fresh world); with ``gold_path`` also plan its gold actions."""
        self._call("load", task_name, variation, "", gold_path)
        self.episodes += 1

    def step(self, action: str) -> str:
        """Apply one action; returns the engine's text answer."""
        return str(self._call("step", action))

    def score(self) -> int:
        """Current progress score on 0-100 (the engine reports 0-1; -1 marks a failed task)."""
        return int(round(100 * float(self._call("getScore"))))

    def completed(self) -> bool:
        return bool(self._call("getCompleted"))

    def num_moves(self) -> int:
        return int(self._call("getNumMoves"))

    def task_description(self) -> str:
        return str(self._call("getTaskDescription"))

    def look(self) -> str:
        """The room description, without spending a move."""
        return str(self._call("freeActionLook"))

    def valid_actions(self) -> list[str]:
        """Every action/object combination valid in the current state (expensive: ~10 ms)."""
        return [str(a) for a in self._call("getValidActionObjectCombinations")]

    def gold_actions(self) -> list[str]:
        """The engine's gold action sequence (only after ``load(..., gold_path=True)``)."""
        return [str(a) for a in self._call("getGoldActionSequence")]

    def task_names(self) -> list[str]:
        return [str(n) for n in self._call("getTaskNames")]

    def max_variations(self, task_name: str) -> int:
        return int(self._call("getTaskMaxVariations", task_name))

    def variation_splits(self) -> dict[str, list[int]]:
        """The official train/dev/test variation ids of the loaded task."""
        return {
            "train": [int(v) for v in self._call("getVariationsTrain")],
            "dev": [int(v) for v in self._call("getVariationsDev")],
            "test": [int(v) for v in self._call("getVariationsTest")],
        }


class SimulatorPool:
    """Warm simulators kept between environment instances of one process.

    ``acquire`` hands out an idle live JVM (or starts one); ``release`` keeps up to ``max_idle``
    for reuse and stops the rest, so a server that creates and closes instances pays the JVM start
    once. Dead JVMs are never handed out.
    """

    def __init__(self, max_idle: int = 1) -> None:
        self.max_idle = max_idle
        self._idle: list[Simulator] = []
        self._lock = threading.Lock()
        self.started = 0  # JVMs this pool started, for tests and metrics

    def acquire(self, *, heap: str | None) -> Simulator:
        with self._lock:
            while self._idle:
                sim = self._idle.pop()
                if sim.alive and sim.heap == heap:
                    return sim
                sim.close()
        return self.start(heap=heap)

    def start(self, *, heap: str | None) -> Simulator:
        """Start a fresh JVM (bypassing the idle list), counted in ``started``."""
        with self._lock:
            self.started += 1
        return Simulator(heap=heap)

    def release(self, sim: Simulator) -> None:
        with self._lock:
            if sim.alive and len(self._idle) < self.max_idle:
                self._idle.append(sim)
                return
        sim.close()

    def close_idle(self) -> None:
        """Stop every idle JVM (the pool stays usable)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for sim in idle:
            sim.close()

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [sim.pid for sim in self._idle]


#: The process-wide pool every :class:`~agentgym_env_sciworld.env.SciWorldEnv` draws from.
POOL = SimulatorPool()
atexit.register(POOL.close_idle)
