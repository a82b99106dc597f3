"""BabyAI as an agentgym text environment (AgentGym-compatible observations and macro actions)."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Any, ClassVar

from minigrid.minigrid_env import MiniGridEnv
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentgym_core.env import (
    Env,
    EpisodeEndedError,
    ResetResult,
    StepResult,
    TaskCatalog,
)
from agentgym_core.http.compat_spec import AgentGymCompat
from agentgym_env_babyai.grid import grid_map
from agentgym_env_babyai.levels import build_catalog, level_name, make_level, task_level_seed
from agentgym_env_babyai.repair import repair_strict_order
from agentgym_env_babyai.view import FORWARD, View

__all__ = ["BabyAIConfig", "BabyAIEnv", "normalize_action"]

INSTRUCTION = """\
You are an exploration master that wants to finish every goal you are given. You are placed in a \
grid world of rooms, and every round you receive an observation: your goal, what you can see in \
front of you, what you carry, and the list of available actions. Answer with one action per turn.

Actions (copy object names and numbers from the observation, e.g. "red ball 1"):
- turn left / turn right: turn 90 degrees in place.
- move forward: step one cell forward.
- go to <obj> <id>: walk next to the object and face it.
- pickup <obj> <id>: walk to the object and pick it up (you can carry one object at a time).
- go through <door> <id>: walk through an open door.
- toggle and go through <door> <id>: open a closed door, or a locked door while carrying a key of \
its colour, then walk through it.
- toggle: open or close the door (or open the box) right in front of you.
- drop: put the carried object down in the empty cell in front of you.
- check available actions: list the actions you can take now.

Reply in this format:
Thought: <your reasoning about the situation>
Action: <one action from the available actions>"""

_SPACES = re.compile(r"\s+")
_TARGETED_NO_NUMBER = re.compile(r"^(go to|pickup|go through|toggle and go through) \D+$")
_CHECK = "check available actions"


def normalize_action(text: str) -> str:
    """Canonical spelling of an action: lower case, single spaces, no quotes or final period,
    and ``pick up`` accepted for ``pickup`` (AgentGym's own prompt spells it both ways)."""
    text = _SPACES.sub(" ", text.strip().strip("`'\"").strip().rstrip(".").lower())
    if text.startswith("pick up "):
        text = "pickup " + text[len("pick up ") :]
    return text


class BabyAIConfig(BaseModel):
    """Options of the BabyAI environment (pass them as keyword arguments to `BabyAIEnv`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_turns: int | None = Field(
        default=None,
        ge=1,
        description="Truncate the episode after this many agent turns (actions, valid or not). "
        "None: only the level's own primitive-step limit (minigrid's max_steps) applies.",
    )
    list_actions: bool = Field(
        default=True,
        description="Append 'Available actions: [...]' to every observation, as AgentGym does.",
    )
    grid_in_info: bool = Field(
        default=True,
        description="Put a compact text map of the whole grid in each step's info['grid'] (for the "
        "trajectory viewer; the agent never sees it). See agentgym_env_babyai.grid.",
    )
    refuse_no_op_go_to: bool = Field(
        default=False,
        description="Leave 'go to X' out of the available actions while the agent already faces X, "
        "and refuse it like any unlisted action (it would do nothing). With rollout.end_on_invalid_action "
        "a training episode then ends at such a move instead of repeating it. False lists it, as AgentGym does.",
    )
    repair_strict_order: bool = Field(
        default=True,
        description="Repair minigrid 3.2's verifier bug that fails ordered Debug missions (e.g. "
        "OpenDoorsOrderN4Debug 'open A, then open B') the moment A opens; see "
        "agentgym_env_babyai.repair. False reproduces minigrid (and AgentGym) exactly.",
    )


class BabyAIEnv(Env):
    """BabyAI levels from minigrid with AgentGym-style text observations and macro actions.

    Task ``i`` is level ``i % 40`` with minigrid seed ``i // 40`` (see
    :mod:`agentgym_env_babyai.levels`). The layout is fixed by the task id; ``seed`` in
    :meth:`reset` is accepted for the interface but does not change anything, because BabyAI's
    dynamics are deterministic once the layout is drawn (so every member of a GRPO group gets the
    same task).

    Reward is minigrid's: ``1 - 0.9 * primitive_steps / max_steps`` on the step that completes the
    mission, else 0. A macro action costs as many primitive steps as it expands to. ``terminated``
    is set when the mission succeeds or fails (Debug levels fail on a wrong move), ``truncated``
    when the level's primitive-step limit or ``max_turns`` is reached.
    """

    name: ClassVar[str] = "babyai"
    max_episode_steps: ClassVar[int | None] = None
    # Steps take microseconds: the server calls them on its event loop, not in worker threads.
    inline_calls: ClassVar[bool] = True
    # AgentGym's own answers: its text (AgentGymBabyAIEnv), /reset with 'deleted', /observation as its
    # status object, /close a bare true.
    agentgym_compat: ClassVar[AgentGymCompat | None] = AgentGymCompat(
        env_class="agentgym_env_babyai.personality:AgentGymBabyAIEnv", env_kwargs={"grid_in_info": False},
        reset_fields=("observation", "reward", "score", "deleted", "done"),
        observation_method="agentgym_status",
        close_answer="bool",
    )

    def __init__(self, config: BabyAIConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise TypeError("pass either a BabyAIConfig or keyword options, not both")
        self.config = config if config is not None else _build_config(options)
        self._games: dict[str, MiniGridEnv] = {}
        self._game: MiniGridEnv | None = None
        self._grid = ""  # grid_digest of the current grid; "" once a primitive may have changed it
        self._view: View | None = None
        self._ended = True
        self._turns = 0

    # -- what the agent is told -------------------------------------------------------------
    @property
    def instruction(self) -> str:
        return INSTRUCTION

    @classmethod
    def tasks(cls) -> TaskCatalog:
        return build_catalog()

    # -- the episode ---------------------------------------------------------------------------
    def reset(self, task_id: int, seed: int | None = None) -> ResetResult:
        level, level_seed = task_level_seed(task_id)
        game = self._games.get(level)
        if game is None:
            game = self._games[level] = make_level(level)
        obs, _ = game.reset(seed=level_seed)
        if self.config.repair_strict_order:
            repair_strict_order(game)
        return self._started(task_id, seed, game, obs)

    def _started(self, task_id: int, seed: int | None, game: MiniGridEnv, obs: Any) -> ResetResult:
        """The episode on ``game`` (just reset; ``obs`` its first view) begins."""
        level, level_seed = task_level_seed(task_id)
        self._game, self._ended, self._turns = game, False, 0
        self._grid = grid_digest(game)
        self._view = self._look(obs)
        observation = self._first_observation(game, obs)
        info = {
            "task_id": task_id,
            "level": level_name(level),
            "level_seed": level_seed,
            "seed": seed,
            "mission": game.mission,
            "max_steps": game.max_steps,
            "state_key": state_key(game, self._grid),
        }
        if self.config.grid_in_info:
            info["grid"] = grid_map(game)
        return ResetResult(observation=observation, info=info)

    def _first_observation(self, game: MiniGridEnv, obs: Any) -> str:
        return f"Your goal: {game.mission}\n{self._with_actions(self._view.description)}"  # type: ignore[union-attr]

    def step(self, action: str) -> StepResult:
        if self._ended or self._game is None or self._view is None:
            raise EpisodeEndedError(
                "no episode in progress: the last one ended (or none was started); call reset(task_id)"
            )
        self._turns += 1
        game, view = self._game, self._view
        text = normalize_action(action)
        if text not in view.actions and _TARGETED_NO_NUMBER.match(text) and f"{text} 1" in view.actions:
            text = f"{text} 1"  # "pickup red ball" means the nearest one

        reward, terminated, truncated, primitives = 0.0, False, False, 0
        valid = text in view.actions or text == _CHECK
        if text == _CHECK:
            message = "You can take the following actions: " + ", ".join(view.actions) + "."
        elif not valid:
            message = f"Invalid action '{text}': {view.explain(text)}"
        else:
            message = ""
            obs = None
            for primitive in view.actions[text]:
                if primitive == FORWARD and not _can_enter(game):
                    # The plan came from what the agent could see; the cell beyond a door may
                    # hold something it could not. Stop rather than bump into it.
                    message = "You stopped because the way ahead is blocked."
                    break
                obs, step_reward, terminated, truncated, _ = game.step(primitive)
                reward += float(step_reward)
                primitives += 1
                if primitive > FORWARD:  # pickup, drop, toggle: the grid itself may have changed
                    self._grid = ""
                if terminated or truncated:
                    break
            if obs is not None:
                self._view = view = self._look(obs)
            elif text.startswith("go to"):
                message = f"You are already facing the {text[len('go to ') :]}."

        success: bool | None = None
        if terminated:
            truncated = False  # minigrid may flag both on the last step; reaching the goal wins
            success = reward > 0
        elif not truncated and self.config.max_turns is not None and self._turns >= self.config.max_turns:
            truncated = True
        if truncated:
            success = False
        self._ended = terminated or truncated

        if self._ended:
            ending = {True: "The task is completed.", False: "The task has failed."}[bool(success)]
            if truncated:
                ending = "You ran out of steps; the task is not completed."
            observation = f"{view.description}\n{ending}"
        else:
            observation = self._with_actions(view.description)
        if message:
            observation = f"{message}\n{observation}"
        if not self._grid:
            self._grid = grid_digest(game)
        info = {
            "action": text,
            "action_valid": valid,
            "primitive_steps": primitives,
            "steps_used": game.step_count,
            "max_steps": game.max_steps,
            "turns": self._turns,
            "state_key": state_key(game, self._grid),
        }
        if self.config.grid_in_info:
            info["grid"] = grid_map(game)
        return StepResult(
            observation=observation,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            success=success,
            invalid_action=not valid,
            info=info,
        )

    def available_actions(self) -> list[str] | None:
        if self._ended or self._view is None:
            return []
        return list(self._view.actions)

    def close(self) -> None:
        for game in self._games.values():
            game.close()
        self._games.clear()
        self._game, self._view, self._ended = None, None, True

    # -- internals (also used by the expert's replica) -------------------------------------
    @property
    def game(self) -> MiniGridEnv | None:
        """The underlying minigrid level of the current episode (None before reset)."""
        return self._game

    @property
    def view(self) -> View | None:
        """The parsed current view: visible objects, description and action table."""
        return self._view

    def _look(self, obs: dict[str, Any]) -> View:
        carrying = self._game.carrying if self._game is not None else None
        held = (carrying.color, carrying.type) if carrying is not None else None
        view = View(obs["image"].tolist(), held)
        if self.config.refuse_no_op_go_to:
            view.actions = {text: plan for text, plan in view.actions.items() if plan or not text.startswith("go to ")}
        return view

    def _with_actions(self, description: str) -> str:
        if not self.config.list_actions or self._view is None:
            return description
        return f"{description}\nAvailable actions: {json.dumps(list(self._view.actions))}"


def _can_enter(game: MiniGridEnv) -> bool:
    cell = game.grid.get(*game.front_pos)
    return cell is None or cell.can_overlap()


def _build_config(options: dict[str, Any]) -> BabyAIConfig:
    try:
        return BabyAIConfig(**options)
    except ValidationError as exc:
        known = list(BabyAIConfig.model_fields)
        hints = []
        for key in options:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hints.append(f"unknown option {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        detail = "; ".join(hints) if hints else str(exc)
        raise ValueError(f"invalid BabyAI options: {detail}. Valid options: {', '.join(known)}") from exc


def grid_digest(game: MiniGridEnv) -> str:
    """A short hash of the grid's encoding (objects, colours, door states): about 30 us, so it is taken
    at reset and again only after a primitive that can change the grid (pickup, drop, toggle)."""
    return hashlib.blake2b(game.grid.encode().tobytes(), digest_size=8).hexdigest()


def state_key(game: MiniGridEnv, grid: str) -> str:
    """A short name for the exact world state: the grid's digest (:func:`grid_digest`), the agent's cell
    and heading, and what it carries. Equal keys within a task are the same state, which step-level
    estimators (GiGPO) compare across a task's samples."""
    carrying = game.carrying
    held = f"{carrying.color}-{carrying.type}" if carrying is not None else "-"
    x, y = (int(v) for v in game.agent_pos)
    return f"{grid}:{x},{y},{int(game.agent_dir)}:{held}"
