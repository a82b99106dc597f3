"""An expert for BabyAI: minigrid's BabyAIBot, driven through our text actions.

The bot plans on a full minigrid state, which an HTTP client never sees. So the expert keeps its
own *replica*: an in-process :class:`BabyAIEnv` reset to the same task. Each turn it asks the bot
for a primitive action on the replica, translates it into the text action an agent would type
(``turn left``, ``move forward``, ``pickup red ball 1``, ``toggle``, ``drop``), sends that text to
the environment under test and to the replica, and checks that both answer with the same
observation. The environment under test is therefore driven only through ``reset``/``step``
text, exactly as an agent drives it, and works the same in-process or over
:class:`agentgym_core.http.client.HTTPEnv`; any divergence between the two is reported as
:class:`ExpertDesyncError` (a determinism bug), never papered over.

The bot alone cannot solve KeyInBox (it raises when the key is hidden in a box) nor
PutNext*Carrying (it cannot plan while starting with the object in hand), per its docstring and
our probes. When the bot raises, the expert applies one rescue built only from what the agent
sees (drop the carried object; or open a visible box, turning to look for one) and restarts a
fresh bot. Measured on seeds 0-29: PutNextS7N4Carrying 30/30, KeyInBox 27/30 (the misses are
boxes not in sight from the start). Whatever still fails ends as a failure with the bot's error
recorded in :attr:`ExpertResult.error`.
"""

from __future__ import annotations

import copy
import pickle
from collections import deque
from dataclasses import dataclass, field

from minigrid.utils.baby_ai_bot import BabyAIBot

from agentgym_core.env import Env
from agentgym_env_babyai.env import BabyAIConfig, BabyAIEnv
from agentgym_env_babyai.view import DROP, FORWARD, LEFT, PICKUP, RIGHT, TOGGLE

__all__ = ["ExpertDesyncError", "ExpertPolicy", "ExpertResult", "solve"]

_MAX_RESCUES = 3
# Conditional rescue steps, resolved against the replica's view when their turn comes.
_DROP_IF_FREE = "<drop if the cell ahead is free>"
_OPEN_BOX = "<open a visible box, else turn left>"
_SIMPLE = {LEFT: "turn left", RIGHT: "turn right", FORWARD: "move forward", DROP: "drop", TOGGLE: "toggle"}


class ExpertDesyncError(RuntimeError):
    """The environment under test answered differently from the expert's replica."""


class ExpertPolicy:
    """The bot's next text action for one task; call :meth:`act`, then :meth:`observe`."""

    def __init__(self, task_id: int, config: BabyAIConfig | None = None) -> None:
        self.task_id = task_id
        self.replica = BabyAIEnv(config)  # the options of the env under test: the same observations
        self.first_observation = self.replica.reset(task_id).observation
        assert self.replica.game is not None
        self.bot = BabyAIBot(self.replica.game)
        self._pending: deque[str] = deque()
        self._restart = False
        self._rescues = 0

    def act(self) -> str | None:
        """The next action text, or None when the bot has nothing left to do.

        When the bot gives up (it raises on KeyInBox and PutNext*Carrying), the expert tries one
        of two rescues and then restarts a fresh bot on the current state: drop what it carries
        (PutNext*Carrying starts with the object in hand, which the bot cannot plan from), or
        open a visible box (KeyInBox hides the key in one). Without a rescue the bot's error is
        raised.
        """
        while self._pending:
            action = self._resolve(self._pending.popleft())
            if action is not None:
                return action
        if self._restart:
            self._restart = False
            assert self.replica.game is not None
            self.bot = BabyAIBot(self.replica.game)
        try:
            primitive = int(self.bot.replan())
        except Exception:
            if not self._rescue():
                raise
            return self.act()
        if primitive in _SIMPLE:
            return _SIMPLE[primitive]
        if primitive == PICKUP:
            view = self.replica.view
            front = view.front() if view is not None else None
            if front is None:
                raise RuntimeError("the bot wants to pick up, but nothing is in front of the agent")
            return f"pickup {front.label}"
        return None  # the bot's "done": it believes the mission is complete

    def _rescue(self) -> bool:
        """Queue actions that put the bot back on its feet; False if none applies."""
        view = self.replica.view
        if view is None or self._rescues >= _MAX_RESCUES:
            return False
        self._rescues += 1
        self._restart = True
        if view.carrying is not None:
            # Drop it, turning left (at most three times) until the cell ahead is free.
            self._pending.extend([_DROP_IF_FREE, "turn left"] * 3 + [_DROP_IF_FREE])
            return True
        self._pending.extend([_OPEN_BOX] * 4)  # look around for a box, turning left up to 3 times
        return True

    def _resolve(self, action: str) -> str | None:
        """Turn a conditional rescue step into a concrete action (None: skip it)."""
        view = self.replica.view
        assert view is not None
        if action == _DROP_IF_FREE:
            if view.carrying is None or "drop" not in view.actions:
                return None
            self._pending.clear()
            return "drop"
        if action == _OPEN_BOX:
            for obj in view.objects:
                if obj.name.endswith(" box") and f"go to {obj.label}" in view.actions:
                    self._pending.clear()
                    self._pending.append("toggle")
                    return f"go to {obj.label}"
                if obj.name.endswith(" box") and obj is view.front():  # faced, its no-op 'go to' not offered
                    self._pending.clear()
                    return "toggle"
            return "turn left" if self._pending else None
        return action

    def observe(self, action: str, observation: str) -> bool:
        """Apply `action` to the replica and check the env under test saw the same; returns done."""
        mirror = self.replica.step(action)
        if mirror.observation != observation:
            raise ExpertDesyncError(
                f"task {self.task_id}: after {action!r} the environment answered\n{observation!r}\n"
                f"but the expert's replica answered\n{mirror.observation!r}"
            )
        return mirror.done

    def close(self) -> None:
        self.replica.close()


@dataclass
class ExpertResult:
    """How one expert episode went."""

    task_id: int
    success: bool
    reward: float
    turns: int
    actions: list[str] = field(default_factory=list)
    error: str | None = None  # the bot's exception, when it gave up


def solve(env: Env, task_id: int, *, max_turns: int = 2000) -> ExpertResult:
    """Play task `task_id` on `env` (a BabyAIEnv or an HTTPEnv serving one) with the expert."""
    expert = ExpertPolicy(task_id, _options_of(env))
    try:
        first = env.reset(task_id).observation
        if first != expert.first_observation:
            raise ExpertDesyncError(
                f"task {task_id}: reset observations differ:\n{first!r}\n{expert.first_observation!r}"
            )
        result = ExpertResult(task_id=task_id, success=False, reward=0.0, turns=0)
        while result.turns < max_turns:
            try:
                action = expert.act()
            except Exception as exc:  # the bot's own failures (KeyInBox) end the episode, recorded
                result.error = f"{type(exc).__name__}: {exc}"
                break
            if action is None:
                result.error = "the bot stopped before the episode ended"
                break
            step = env.step(action)
            result.turns += 1
            result.actions.append(action)
            result.reward += step.reward
            expert.observe(action, step.observation)
            if step.done:
                result.success = bool(step.success)
                break
        return result
    finally:
        expert.close()


def play_with_lookahead(env: Env, task_id: int) -> None:
    """The expert agentgym trains from: :class:`ExpertPolicy` with a one-step lookahead.

    The bot only emits primitive moves (``turn left``, ``move forward``), so "go to the red ball"
    takes it eight turns where the agent's macro ``go to red ball 1`` takes one. Before each of
    the bot's moves, every listed action is tried on a copy of the expert's replica; one that
    completes the mission at once (the highest reward, the list's order on ties) is taken instead.
    Demonstrations then show the macro an agent should use, and stay short enough to train on.
    """
    expert = ExpertPolicy(task_id, _options_of(env))
    try:
        env.reset(task_id)
        while True:
            best, best_reward = None, 0.0
            for action in expert.replica.available_actions() or []:
                trial = _copy(expert.replica).step(action)
                if trial.success and trial.reward > best_reward:
                    best, best_reward = action, trial.reward
            action = best if best is not None else expert.act()
            if action is None:
                return
            result = env.step(action)
            expert.observe(action, result.observation)
            if result.done:
                return
    finally:
        expert.close()


def _options_of(env: Env) -> BabyAIConfig | None:
    """The options of the local BabyAIEnv under test, seen through wrappers that keep it as ``inner``
    (the warm start's recorder); None (the defaults) for a served one."""
    while not isinstance(env, BabyAIEnv) and isinstance(getattr(env, "inner", None), Env):
        env = env.inner  # type: ignore[attr-defined]
    return env.config if isinstance(env, BabyAIEnv) else None


def _copy(env: BabyAIEnv) -> BabyAIEnv:
    """A deep copy of a replica to try an action on. A pickle round trip copies the same object graph
    as ``copy.deepcopy`` in about a third of the time (no memo lookups in Python), and the lookahead
    copies the replica once per listed action per turn: most of the expert's time. A replica holding
    something pickle refuses (a rescue step's local function) is deep-copied instead."""
    try:
        return pickle.loads(pickle.dumps(env, protocol=pickle.HIGHEST_PROTOCOL))
    except (pickle.PicklingError, AttributeError, TypeError):
        return copy.deepcopy(env)
