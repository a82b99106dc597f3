"""`WebArenaEnv`: web navigation in a real browser, graded by webarena-verified."""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from agentgym_core import Env, EpisodeEndedError, ResetResult, StepResult, TaskCatalog
from agentgym_core.http.compat_spec import AgentGymCompat
from agentgym_env_webarena.actions import ACTION_HELP, ActionParseError, extract_action, parse_action
from agentgym_env_webarena.browser import BrowserPool
from agentgym_env_webarena.config import WebArenaConfig
from agentgym_env_webarena.prompt import INSTRUCTION, format_observation
from agentgym_env_webarena.session import BrowserSession, SessionLostError
from agentgym_env_webarena.tasks import VERIFIED_TASKS_FILE, TaskSet, render_start_urls

__all__ = ["WebArenaEnv"]


class WebArenaEnv(Env):
    """WebArena's 812 tasks in a real Chromium; observation = accessibility tree, reward = verified grade.

    Site URLs come from the SHOPPING, SHOPPING_ADMIN, REDDIT, GITLAB, MAP and WIKIPEDIA environment
    variables (or ``sites=``). All instances in a process share one Chromium (`BrowserPool`), each
    in its own browser context, which ``reset`` replaces: cookies, storage and tabs never leak
    from one episode into the next.
    """

    name: ClassVar[str] = "webarena"
    max_episode_steps: ClassVar[int | None] = 30
    tasks_file: ClassVar[Path] = VERIFIED_TASKS_FILE
    # AgentGym's agentenv-webarena server: {"env_idx"} ids, /reset {"env_idx", "seed", "idx"},
    # /step answers {"observation", "reward", "terminated", "truncated", "info"}.
    agentgym_compat: ClassVar[AgentGymCompat | None] = AgentGymCompat(
        id_field="env_idx", task_field="idx", done_field="terminated", include_score=False,
        reset_answer="observation", step_extra_fields=("truncated", "info"),
    )

    def __init__(self, **kwargs: Any) -> None:
        self.config = WebArenaConfig(**kwargs)
        self.max_episode_steps = self.config.max_steps  # type: ignore[misc]  # per-instance override
        self.pool = BrowserPool.shared(self.config.browser)
        self.session = BrowserSession(self.pool, self.config)
        self._taskset = TaskSet.load(self.tasks_file)
        self._task = None
        self._steps = 0
        self._done = True
        self._previous_action = "None"
        self._closed = False
        self._shots: Path | None = None
        self._lock = threading.Lock()  # the core serialises an instance's calls; this makes it certain

    # -- what the agent is told -------------------------------------------------------------------
    @property
    def instruction(self) -> str:
        return INSTRUCTION

    def parse_action(self, text: str) -> str:
        return extract_action(text)

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return TaskSet.load(cls.tasks_file).catalog()

    @classmethod
    @contextlib.contextmanager
    def conformance_context(cls) -> Iterator[tuple[dict[str, Any], list[int]]]:
        """For the suite's ``check_env_http`` run: the real WebArena sites cannot run here, so
        every site is pointed at the bundled local shop (a stand-in that serves real pages);
        this checks the environment's plumbing, not the tasks' solvability."""
        from agentgym_env_webarena.testing_sites import local_sites

        shop = local_sites().urls["shopping"]
        names = ("shopping", "shopping_admin", "reddit", "gitlab", "map", "wikipedia")
        yield {"sites": {name: shop for name in names}}, cls.tasks().split("test")[:1]

    def site_urls(self) -> dict[str, str]:
        """Site name -> base URL this instance renders start URLs with and grades against."""
        return self.config.resolved_sites()

    # -- the episode ----------------------------------------------------------------------------
    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        # `seed` is accepted for the interface: a web page has no randomness of ours to seed.
        task = self._taskset.get(task_id)
        start_urls = render_start_urls(task, self.site_urls())
        with self._lock:
            self._check_open()
            self._task = task
            self._steps = 0
            self._previous_action = "None"
            self.pool.run(self.session.reset(start_urls), timeout=self._timeout(len(start_urls) + 1))
            self._done = False
            obs, info = self._observe()
        info.update({"task_id": task_id, "sites": [s.value for s in task.sites], "start_urls": start_urls})
        return ResetResult(observation=obs, info=info)

    def step(self, action: str) -> StepResult:
        with self._lock:
            self._check_open()
            if self._done or self._task is None:
                raise EpisodeEndedError("the episode has ended; call reset(task_id) to start another")
            self._steps += 1
            text = extract_action(action)
            try:
                parsed = parse_action(text)
            except ActionParseError as exc:
                return self._answer_invalid(text, f"{exc}. Valid actions: {ACTION_HELP}")
            if not self.session.alive:
                return self._lost("the browser crashed and was restarted; this episode cannot continue")
            if parsed.kind == "stop":
                return self._finish(parsed.answer, parsed.describe())
            try:
                error = self.pool.run(self.session.execute(parsed), timeout=self._timeout())
            except SessionLostError as exc:
                return self._lost(str(exc))
            except TimeoutError:
                error = f"the action did not finish within {self.config.action_timeout_s} s"
            except Exception as exc:  # noqa: BLE001 - a browser-side failure is reported, not raised
                if not self.session.alive:
                    return self._lost("the browser crashed during the action; this episode cannot continue")
                error = f"the action failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            self._previous_action = parsed.describe() + (f" (failed: {error})" if error else "")
            return self._after_action(error, {"action": parsed.describe()})

    def _after_action(self, error: str | None, info: dict[str, Any]) -> StepResult:
        try:
            obs, obs_info = self._observe()
        except SessionLostError as exc:
            return self._lost(str(exc))
        info.update(obs_info)
        if error:
            obs = f"Action failed: {error}\n\n{obs}"
            info["error"] = error
        truncated = self._steps >= self.config.max_steps
        if truncated:
            self._done = True
            obs += "\n\nThe step limit is reached; the episode ends without an answer."
        return StepResult(observation=obs, reward=0.0, truncated=truncated, success=False if truncated else None,
                          invalid_action=bool(info.get("invalid_action")), info=info)

    def _answer_invalid(self, text: str, message: str) -> StepResult:
        self._previous_action = f"invalid action: {text[:200]!r}"
        info: dict[str, Any] = {"invalid_action": True}
        result = self._after_action(message, info)
        return result

    def _finish(self, answer: str, description: str) -> StepResult:
        assert self._task is not None
        try:
            trace = self.pool.run(self.session.network_trace(), timeout=self._timeout())
        except Exception:  # noqa: BLE001 - a dead browser leaves no trace; grade the answer alone
            trace = []
        # WebArena-Verified's evaluators take seconds to import: only an episode that ends pays for it.
        from agentgym_env_webarena.grading import agent_response, grade

        response = agent_response(self._task, answer, self.config.answer_format)
        result = grade(self._task, response, trace, self.site_urls())
        self._done = True
        score = result["score"]
        obs = f"You stopped with the answer {answer!r}. The task is {'solved' if score == 1.0 else 'not solved'}."
        info = {"action": description, "grade": dict(result), "agent_response": response, "trace_events": len(trace)}
        return StepResult(observation=obs, reward=score, terminated=True, success=score == 1.0, invalid_action=False,
                          info=info)

    def _lost(self, message: str) -> StepResult:
        self._done = True
        return StepResult(
            observation=f"Environment error: {message}.",
            truncated=True,
            success=False,
            info={"error": "browser_lost", "detail": message},
        )

    def _observe(self) -> tuple[str, dict[str, Any]]:
        assert self._task is not None
        view = self.pool.run(self.session.observe(), timeout=self._timeout())
        obs = format_observation(
            view, self._task.intent, self._previous_action, self.config.max_observation_chars
        )
        info: dict[str, Any] = {"url": view["url"], "step": self._steps}
        if self.config.screenshot == "base64":
            info["screenshot"] = self.pool.run(self.session.screenshot_b64(), timeout=self._timeout())
        elif self.config.screenshot == "file":
            if self._shots is None:
                self._shots = self.config.screenshot_dir or Path(tempfile.mkdtemp(prefix="agentgym-webarena-"))
                self._shots.mkdir(parents=True, exist_ok=True)
            path = self._shots / f"{id(self):x}-{self._task.task_id}-{self._steps:03d}.jpg"
            info["screenshot"] = self.pool.run(self.session.screenshot_to(path), timeout=self._timeout())
        return obs, info

    def available_actions(self) -> list[str] | None:
        return None  # ids depend on the page; the observation lists them

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._done = True
            with contextlib.suppress(Exception):  # closing must not fail (dead browser, pool shut down)
                self.pool.run(self.session.close(), timeout=self._timeout())

    # -- helpers ----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this WebArenaEnv was closed; create a new instance")

    def _timeout(self, factor: int = 1) -> float:
        # Actions own most of the budget; navigations inside them have their own Playwright limit.
        return self.config.action_timeout_s * factor + self.config.navigation_timeout_s
