"""AgentGym's BabyAI text layer, reproduced rule by rule for the compatibility routes.

AgentGym's BabyAI server (``agentenv-babyai``) describes the view, numbers objects, plans macro
actions and reports rewards in its own way. This package's native text (:mod:`.view`) departs from
it on purpose (nearest-first numbering, planning only through cells the agent can see, a toggle for
boxes, macros that stop when the mission completes, an explicit failure message). Clients of the
AgentGym routes expect AgentGym's answers for a ``data_idx``, so this module reproduces them:

* **Scan.** The 7x7 view is read far row first, left to right within a row; cells with a negative
  absolute coordinate are skipped, but cells past the far edges of the grid read as walls (minigrid
  pads the view with walls). Objects are sorted by Manhattan distance, keeping scan order among
  equals, so of two objects at one distance the farther-forward one comes first; each name
  (``grey key``, ``blue closed door``) is numbered in that order.
* **Barrier.** The nearest wall or box straight ahead is "facing a wall/box N steps away";
  ``move forward`` is offered unless it is 1 step ahead (a ball or key in front does not stop it).
* **Planning.** Breadth-first over (cell, heading) inside the view's bounding box as AgentGym
  computes it (off by one on some headings: a row behind the agent facing east or south, a column
  past the right edge facing south or west); walls, boxes, balls, keys and lava block,
  doors of any state do not; each state's parent is the last state that queued it. Pickups and
  go-tos are numbered among the reachable objects only. ``toggle`` is offered only facing a closed
  door (or a locked one while carrying a matching key), never for a box.
* **Execution.** A macro's primitives run until one leaves the view image unchanged. The answer's
  reward and done are the last primitive's; "The task is completed." follows whenever minigrid says
  done, but done with reward <= 0.5 is answered as not done; a reward of exactly 1 ends it anyway.
  Invalid actions and ``check`` leave the last reward in place (AgentGym answers it again).
* **Goal.** Every "then" and "after you" in the mission reads "and".
* **Levels.** AgentGym ran minigrid 2.x, where ``GoToObjS6-v0`` was registered with a 4x4 room
  (minigrid 3 renamed that layout ``GoToObjS4-v0``), and where a generated level kept the locked
  room of its previous mission (minigrid 3 fixed that leak): AgentGym builds a fresh level for each
  reset and resets it twice with the same seed, so the leaked room of the first draw shapes the
  second. :func:`make_agentgym_level` and :func:`reset_agentgym_level` reproduce both.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from gymnasium.envs.registration import load_env_creator, spec
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT, STATE_TO_IDX
from minigrid.envs.babyai.core.levelgen import LevelGen
from minigrid.minigrid_env import MiniGridEnv

__all__ = ["AgentGymEpisode", "AgentGymView", "agentgym_goal", "make_agentgym_level", "reset_agentgym_level"]

LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = 0, 1, 2, 3, 4, 5
_DIR_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))  # minigrid's agent_dir 0..3: east, south, west, north
_VIEW = 7
_SEEN_KINDS = ("door", "key", "ball", "box", "goal", "lava", "wall")
_BLOCKING_KINDS = frozenset({"wall", "box", "lava", "ball", "key"})
_IDX_TO_STATE = {idx: state for state, idx in STATE_TO_IDX.items()}
_CHECK = "check available actions"
_UNKNOWN = "The action is not recognized. Please check valid actions."

Cell = tuple[int, int]
State = tuple[Cell, int]


# The layout AgentGym's level name meant under the minigrid it ran (see the module docstring).
_LEVEL_AS_AGENTGYM_RAN_IT = {"BabyAI-GoToObjS6-v1": "BabyAI-GoToObjS4-v0"}


def _keep_stale_locked_room(level_cls: type) -> type:
    """A subclass whose ``locked_room`` survives the reset to None at each new mission (minigrid 2)."""

    def get(self: Any) -> Any:
        return self.__dict__.get("_agentgym_locked_room")

    def set_(self: Any, room: Any) -> None:
        if room is not None or "_agentgym_locked_room" not in self.__dict__:
            self.__dict__["_agentgym_locked_room"] = room

    return type(f"AgentGym{level_cls.__name__}", (level_cls,), {"locked_room": property(get, set_)})


def make_agentgym_level(level: str) -> MiniGridEnv:
    """A fresh level as AgentGym's server builds it for one reset (``level``: our level id)."""
    level_spec = spec(_LEVEL_AS_AGENTGYM_RAN_IT.get(level, level))
    level_cls = load_env_creator(level_spec.entry_point)
    if isinstance(level_cls, type) and issubclass(level_cls, LevelGen):
        level_cls = _keep_stale_locked_room(level_cls)
    return level_cls(**level_spec.kwargs)


def reset_agentgym_level(game: MiniGridEnv, seed: int) -> dict[str, Any]:
    """Reset as AgentGym does: twice with one seed (its constructor resets, then its reset again)."""
    if isinstance(game, LevelGen):  # only these carry state from one draw into the next
        game.reset(seed=seed)
    obs, _ = game.reset(seed=seed)
    return obs


def agentgym_goal(mission: str) -> str:
    """The goal as AgentGym states it: sequence words replaced by "and"."""
    return mission.replace("then", "and").replace("after you", "and")


@dataclass(frozen=True)
class _Seen:
    name: str  # "grey key", "blue closed door", "grey wall"
    kind: str
    color: str
    cell: Cell  # absolute grid coordinates
    distance: int  # Manhattan distance from the agent


def _add(a: Cell, b: Cell, scale: int = 1) -> Cell:
    return a[0] + scale * b[0], a[1] + scale * b[1]


def _span(start: int, border: int) -> range:
    # The view box as AgentGym bounds it: inclusive of `start` on one side only.
    return range(border, start + 1) if border < start else range(start, border)


class AgentGymView:
    """AgentGym's description, action table and refusal messages for one agent state."""

    def __init__(self, game: MiniGridEnv, image: Any) -> None:
        self.pos: Cell = (int(game.agent_pos[0]), int(game.agent_pos[1]))
        self.dir = int(game.agent_dir)
        carrying = game.carrying
        self.carrying: tuple[str, str] | None = (carrying.color, carrying.type) if carrying is not None else None
        forward = _DIR_VEC[self.dir]
        right = (-forward[1], forward[0])
        self._forward, self._right = forward, right
        top_left = _add(_add(self.pos, forward, _VIEW - 1), right, -(_VIEW // 2))
        border = _add(top_left, (right[0] - forward[0], right[1] - forward[1]), _VIEW)
        self._xs, self._ys = _span(top_left[0], border[0]), _span(top_left[1], border[1])
        self.objects, self.barriers = self._scan(image, top_left)
        self._blocked = {o.cell for o in (*self.objects, *self.barriers) if o.kind in _BLOCKING_KINDS}
        self.description = self._describe()
        self.errors: dict[str, str] = {}
        self.actions = self._action_table()

    # -- seeing ------------------------------------------------------------------------------
    def _scan(self, image: Any, top_left: Cell) -> tuple[list[_Seen], list[_Seen]]:
        objects, barriers = [], []
        forward, right = self._forward, self._right
        for row in range(_VIEW):
            for col in range(_VIEW):
                cell = _add(_add(top_left, forward, -row), right, col)
                offset = (cell[0] - self.pos[0], cell[1] - self.pos[1])
                distance = abs(offset[0]) + abs(offset[1])
                if cell[0] < 0 or cell[1] < 0 or distance == 0:
                    continue
                kind_idx, color_idx, state_idx = (int(v) for v in image[col][row])
                kind, color = IDX_TO_OBJECT[kind_idx], IDX_TO_COLOR[color_idx]
                if kind not in _SEEN_KINDS:
                    continue
                name = f"{color} {_IDX_TO_STATE[state_idx]} door" if kind == "door" else f"{color} {kind}"
                objects.append(_Seen(name, kind, color, cell, distance))
                if kind in ("box", "wall") and forward[0] * offset[1] - forward[1] * offset[0] == 0:
                    ahead = forward[0] * offset[0] + forward[1] * offset[1]
                    barriers.append(_Seen(kind, kind, color, cell, ahead))
        objects.sort(key=lambda o: o.distance)
        barriers.sort(key=lambda o: o.distance)
        return objects, barriers

    def _describe(self) -> str:
        if self.objects:
            text = "In front of you in this room, you can see several objects: "
            counts: dict[str, int] = {}
            for obj in self.objects:
                if obj.kind == "wall":
                    continue
                counts[obj.name] = counts.get(obj.name, 0) + 1
                text += f"There is a {obj.name} {counts[obj.name]} {self._where(obj.cell)}  "
        else:
            text = "You cannot see any objects within sight."  # AgentGym adds no space after it
        text += "The room has walls around you. "
        if self.barriers:
            text += f"You are facing a {self.barriers[0].name} {self.barriers[0].distance} steps away. "
        if self.carrying is not None:
            return text + f"You are carrying a {self.carrying[0]} {self.carrying[1]}."
        return text + "You are not carrying anything."

    def _where(self, cell: Cell) -> str:
        offset = (cell[0] - self.pos[0], cell[1] - self.pos[1])
        ahead = self._forward[0] * offset[0] + self._forward[1] * offset[1]
        aside = self._right[0] * offset[0] + self._right[1] * offset[1]
        if aside == 0:
            return f"right in front of you {ahead} steps away."
        side = "right" if aside > 0 else "left"
        return f"{ahead} steps in front of you and {abs(aside)} steps to your {side}."

    # -- planning ----------------------------------------------------------------------------
    def find_path(self, goal: Cell, *, arrive: bool) -> list[int] | None:
        """Primitives that reach `goal` (``arrive``) or end next to it facing it; None if none."""
        start: State = (self.pos, self.dir)
        queue: deque[State] = deque([start])
        expanded: set[State] = set()
        parent: dict[State, tuple[State, int]] = {}
        while queue:
            state = queue.popleft()
            expanded.add(state)
            cell, heading = state
            if cell == goal if arrive else _add(cell, _DIR_VEC[heading]) == goal:
                path = []
                while state != start:
                    state, action = parent[state]
                    path.append(action)
                return path[::-1]
            for action, nxt in (
                (FORWARD, (_add(cell, _DIR_VEC[heading]), heading)),
                (LEFT, (cell, (heading - 1) % 4)),
                (RIGHT, (cell, (heading + 1) % 4)),
            ):
                (x, y), _ = nxt
                if x not in self._xs or y not in self._ys or nxt in expanded or nxt[0] in self._blocked:
                    continue
                queue.append(nxt)
                parent[nxt] = (state, action)  # the last state to queue it wins, as in AgentGym
        return None

    def _action_table(self) -> dict[str, list[int]]:
        actions: dict[str, list[int]] = {"turn left": [LEFT], "turn right": [RIGHT]}
        errors = self.errors
        if not self.barriers or self.barriers[0].distance > 1:
            actions["move forward"] = [FORWARD]
        else:
            errors["move forward"] = "There is a barrier in front of you, you can't move forward."
        if self.carrying is None:
            self._number_reachable(actions, "pickup", ("wall", "door", "goal"), [PICKUP])
            errors["drop"] = "You cannot drop the object, as you are not carrying anything."
        else:
            ahead = _add(self.pos, self._forward)
            if any(o.cell == ahead and o.kind in _BLOCKING_KINDS for o in self.objects):
                errors["drop"] = "You cannot drop the object, as there is already an object in front of you."
            else:
                actions["drop"] = [DROP]
        self._doors(actions)
        for obj in self.objects:
            if obj.kind == "goal":
                path = self.find_path(obj.cell, arrive=True)
                if path is None:
                    errors["go to goal"] = "You cannot go to the goal, as there is no path leading to it."
                else:
                    actions["go to goal"] = path
        self._number_reachable(actions, "go to", ("wall", "goal"), [])
        actions[_CHECK] = []
        return actions

    def _number_reachable(self, actions: dict[str, list[int]], verb: str, skip: tuple[str, ...],
                          then: list[int]) -> None:
        """Add ``<verb> <name> <n>`` for each reachable object, numbered among the reachable ones."""
        count: dict[str, int] = {}
        for obj in self.objects:
            if obj.kind in skip:
                continue
            path = self.find_path(obj.cell, arrive=False)
            first = f"{verb} {obj.name} 1"
            if path is not None:
                count[obj.name] = 1 if first not in actions else count[obj.name] + 1
                actions[f"{verb} {obj.name} {count[obj.name]}"] = path + then
            else:
                label = f"{obj.name} 1" if first not in actions else f"{obj.name} {count[obj.name] + 1}"
                self.errors[f"{verb} {label}"] = f"You cannot {verb} {label}, as there is no path leading to it."

    def _doors(self, actions: dict[str, list[int]]) -> None:
        count: dict[str, int] = {}
        for obj in self.objects:
            if obj.kind != "door":
                continue
            count[obj.name] = count.get(obj.name, 0) + 1
            label = f"{obj.name} {count[obj.name]}"
            state = obj.name.split(" ")[1]
            if state == "open":
                path = self.find_path(obj.cell, arrive=True)
                if path is None:
                    self.errors[f"go through {label}"] = f"You cannot go through {label}, as there is no path leading to it."
                else:
                    actions[f"go through {label}"] = path
                continue
            if state == "locked":
                why = None
                if self.carrying is None or self.carrying[1] != "key":
                    why = "as you are not carrying a key."
                elif self.carrying[0] != obj.color:
                    why = "as the color of the key you are carrying does not match the color of door."
                if why is not None:
                    self.errors[f"toggle and go through {label}"] = f"You cannot toggle and go through {label}, {why}"
                    continue
            path = self.find_path(obj.cell, arrive=False)
            if path is None:
                # AgentGym prints its whole per-name counter here instead of the number.
                self.errors[f"toggle and go through {label}"] = (
                    f"You cannot toggle and go through {obj.name} {count}, as there is no path leading to it.")
            else:
                actions[f"toggle and go through {label}"] = [*path, TOGGLE, FORWARD]
                if not path:
                    actions["toggle"] = [TOGGLE]
            if state == "closed":
                self.errors[f"go through {label}"] = (
                    f"You cannot go through {label}, as it is closed. You should toggle it first.")

    def actions_line(self) -> str:
        """``Available actions: ["turn left", ...]`` as AgentGym appends it."""
        return "Available actions: [" + ", ".join(f'"{a}"' for a in self.actions) + "]"


class AgentGymEpisode:
    """One episode as AgentGym's server plays it: its observations, rewards and done flags."""

    def __init__(self, game: MiniGridEnv, obs: dict[str, Any]) -> None:
        self.game = game
        self.goal = agentgym_goal(game.mission)
        self.view = AgentGymView(game, obs["image"])
        self._image = obs["image"]
        self.state_text = self.view.description  # AgentGym's latest "state" line
        self.reward = 0.0
        self.done = False

    def observation(self, *, with_goal: bool = False) -> str:
        """The state text plus the action list (and the goal line first, as /reset shows it)."""
        text = f"{self.state_text}\n{self.view.actions_line()}"
        return f"Your goal: {self.goal}\n{text}" if with_goal else text

    def step(self, action: str) -> tuple[bool, int]:
        """Apply one action; returns (valid, primitive steps run). Read the answer from the fields."""
        text = action.lower().strip()
        view = self.view
        if "check" in text:
            self.state_text = "You can take the following actions: " + ", ".join(view.actions)
            return True, 0
        if text not in view.actions:
            self.state_text = "No change in state." if text == "" else view.errors.get(text, _UNKNOWN)
            return False, 0
        obs, reward, done, primitives = None, 0.0, False, 0
        for primitive in view.actions[text]:
            obs, reward, done, _, _ = self.game.step(primitive)
            primitives += 1
            if (obs["image"] == self._image).all():
                break
            self._image = obs["image"]
        if obs is None:  # an empty plan ("go to" what the agent already faces)
            self.state_text = "No change in state."
            return True, 0
        self._image = obs["image"]
        self.view = AgentGymView(self.game, obs["image"])
        self.state_text = self.view.description
        self.reward = float(reward)
        self.done = bool(done) and self.reward > 0.5
        if done:
            self.state_text += "\n The task is completed."
        if self.reward == 1 and not self.done:
            self.done = True
            self.state_text += "\n The task is completed."
        return True, primitives
