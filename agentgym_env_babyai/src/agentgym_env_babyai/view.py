"""What the agent sees, in words, and which macro actions it can take from there.

A :class:`View` is built from minigrid's egocentric 7x7 observation (``obs["image"]``, indexed
``[x][y]``, the agent at column 3 of the bottom row, facing up) plus what the agent carries. It
knows only what the agent can see: macro actions are planned by breadth-first search over
visible free cells, as in AgentGym, never over the hidden map.

Wording follows AgentGym's BabyAI server (``There is a red ball 1 3 steps in front of you and 1
steps to your left.``); objects of the same name are numbered by distance, nearest first, and the
number is what the macro actions refer to (``pickup red ball 1``).
"""

from __future__ import annotations

import re
from collections import deque
from typing import NamedTuple

__all__ = ["FORWARD", "LEFT", "RIGHT", "PICKUP", "DROP", "TOGGLE", "SeenObject", "View"]

# minigrid's primitive actions.
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = 0, 1, 2, 3, 4, 5

# minigrid's object/colour/state encodings (minigrid.core.constants), spelled out so the hot path
# does plain int comparisons.
_UNSEEN, _EMPTY, _WALL, _FLOOR, _DOOR, _KEY, _BALL, _BOX, _GOAL, _LAVA = range(10)
_TYPE_NAMES = {_DOOR: "door", _KEY: "key", _BALL: "ball", _BOX: "box", _GOAL: "goal", _LAVA: "lava"}
_COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
_DOOR_STATES = ("open", "closed", "locked")
_OPEN = 0
_PICKABLE = (_KEY, _BALL, _BOX)

_SIZE = 7
_AGENT_X, _AGENT_Y = 3, 6
# View-frame headings: 0 up (the agent's facing at plan start), 1 right, 2 down, 3 left.
_DX = (0, 1, 0, -1)
_DY = (-1, 0, 1, 0)

_TARGETED = re.compile(r"^(go to|pickup|go through|toggle and go through) (.+) (\d+)$")


class SeenObject(NamedTuple):
    """One visible object, in the agent's frame (forward >= 0, right < 0 means left)."""

    name: str  # "red ball", "blue closed door"
    number: int  # 1 for the nearest object of this name
    kind: int  # minigrid object index
    color: str
    state: int  # door state (0 open, 1 closed, 2 locked); 0 for other objects
    x: int
    y: int
    forward: int
    right: int

    @property
    def label(self) -> str:
        return f"{self.name} {self.number}"


def _passable(cell: list[int]) -> bool:
    kind = cell[0]
    return kind in (_EMPTY, _FLOOR, _GOAL) or (kind == _DOOR and cell[2] == _OPEN)


class View:
    """The text observation and the action table for one agent state.

    ``actions`` maps every available action text to its primitive-action plan; it is ordered as
    listed to the agent. Primitive plans stop early at run time if the world disagrees (see
    :meth:`agentgym_env_babyai.env.BabyAIEnv.step`).
    """

    __slots__ = ("grid", "carrying", "objects", "by_label", "description", "actions", "_parent")

    def __init__(self, image: list[list[list[int]]], carrying: tuple[str, str] | None) -> None:
        self.grid = image
        self.carrying = carrying  # (colour, type) of the carried object
        self.objects = self._find_objects()
        self.by_label = {obj.label: obj for obj in self.objects}
        self._parent = self._search()
        self.description = self._describe()
        self.actions = self._action_table()

    # -- seeing ------------------------------------------------------------------------------
    def _find_objects(self) -> list[SeenObject]:
        grid = self.grid
        found = []
        for x in range(_SIZE):
            column = grid[x]
            for y in range(_SIZE):
                kind = column[y][0]
                if kind not in _TYPE_NAMES or (x == _AGENT_X and y == _AGENT_Y):
                    continue  # the agent's own cell shows what it carries; that is not "in front"
                forward, right = _AGENT_Y - y, x - _AGENT_X
                found.append((forward + abs(right), forward, right, x, y, column[y]))
        found.sort()
        counts: dict[str, int] = {}
        objects = []
        for _, forward, right, x, y, (kind, color, state) in found:
            color_name = _COLORS[color]
            if kind == _DOOR:
                name = f"{color_name} {_DOOR_STATES[state]} door"
            else:
                name, state = f"{color_name} {_TYPE_NAMES[kind]}", 0
            counts[name] = counts.get(name, 0) + 1
            objects.append(SeenObject(name, counts[name], kind, color_name, state, x, y, forward, right))
        return objects

    def _describe(self) -> str:
        if self.objects:
            parts = ["In front of you in this room, you can see several objects:"]
            for obj in self.objects:
                if obj.right == 0:
                    where = f"right in front of you {obj.forward} steps away"
                elif obj.right > 0:
                    where = f"{obj.forward} steps in front of you and {obj.right} steps to your right"
                else:
                    where = f"{obj.forward} steps in front of you and {-obj.right} steps to your left"
                parts.append(f"There is a {obj.label} {where}.")
        else:
            parts = ["You cannot see any objects within sight."]
        parts.append("The room has walls around you.")
        wall = self._wall_ahead()
        if wall:
            parts.append(f"You are facing a wall {wall} steps away.")
        if self.carrying:
            parts.append(f"You are carrying a {self.carrying[0]} {self.carrying[1]}.")
        else:
            parts.append("You are not carrying anything.")
        return " ".join(parts)

    def _wall_ahead(self) -> int | None:
        column = self.grid[_AGENT_X]
        for y in range(_AGENT_Y - 1, -1, -1):
            kind = column[y][0]
            if kind == _WALL:
                return _AGENT_Y - y
            if kind == _UNSEEN or not _passable(column[y]):
                return None
        return None

    def front(self) -> SeenObject | None:
        """The object in the cell right in front of the agent, if any."""
        for obj in self.objects:
            if obj.forward == 1 and obj.right == 0:
                return obj
            if obj.forward + abs(obj.right) > 1:
                return None
        return None

    # -- planning ----------------------------------------------------------------------------
    def _search(self) -> dict[tuple[int, int, int], tuple[tuple[int, int, int], int] | None]:
        """BFS over (x, y, heading) through visible free cells; returns the parent links."""
        grid = self.grid
        start = (_AGENT_X, _AGENT_Y, 0)
        parent: dict[tuple[int, int, int], tuple[tuple[int, int, int], int] | None] = {start: None}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            x, y, d = state
            nx, ny = x + _DX[d], y + _DY[d]
            moves = [((x, y, (d - 1) % 4), LEFT), ((x, y, (d + 1) % 4), RIGHT)]
            if 0 <= nx < _SIZE and 0 <= ny < _SIZE and _passable(grid[nx][ny]):
                moves.insert(0, ((nx, ny, d), FORWARD))
            for nxt, action in moves:
                if nxt not in parent:
                    parent[nxt] = (state, action)
                    queue.append(nxt)
        return parent

    def _plan(self, goal: tuple[int, int, int]) -> list[int]:
        actions = []
        link = self._parent[goal]
        while link is not None:
            goal, action = link
            actions.append(action)
            link = self._parent[goal]
        actions.reverse()
        return actions

    def path_to_face(self, obj: SeenObject) -> list[int] | None:
        """Primitive moves that end adjacent to `obj` and facing it; None if no visible path."""
        best = None
        for d in range(4):
            state = (obj.x - _DX[d], obj.y - _DY[d], d)
            if state in self._parent:
                plan = self._plan(state)
                if best is None or len(plan) < len(best):
                    best = plan
        return best

    def _action_table(self) -> dict[str, tuple[int, ...]]:
        table: dict[str, tuple[int, ...]] = {"turn left": (LEFT,), "turn right": (RIGHT,)}
        front_cell = self.grid[_AGENT_X][_AGENT_Y - 1]
        if _passable(front_cell):
            table["move forward"] = (FORWARD,)
        for obj in self.objects:
            path = self.path_to_face(obj)
            if path is None:
                continue
            table[f"go to {obj.label}"] = tuple(path)
            if obj.kind in _PICKABLE and self.carrying is None:
                table[f"pickup {obj.label}"] = (*path, PICKUP)
            elif obj.kind == _DOOR:
                if obj.state == _OPEN:
                    table[f"go through {obj.label}"] = (*path, FORWARD, FORWARD)
                elif obj.state == 1 or self.carrying == (obj.color, "key"):
                    table[f"toggle and go through {obj.label}"] = (*path, TOGGLE, FORWARD, FORWARD)
        front = self.front()
        if front is not None and front.kind in (_DOOR, _BOX):
            table["toggle"] = (TOGGLE,)
        if self.carrying is not None and front_cell[0] == _EMPTY:
            table["drop"] = (DROP,)
        return table

    # -- explaining refusals --------------------------------------------------------------------
    def explain(self, action: str) -> str:
        """Why `action` is not available here (the action is not in :attr:`actions`)."""
        match = _TARGETED.match(action)
        if match:
            verb, name, number = match.groups()
            obj = self.by_label.get(f"{name} {number}")
            if obj is None:
                return f"There is no {name} {number} in sight."
            if verb == "go to" and self.path_to_face(obj) == []:
                return f"You are already facing the {obj.label}: going to it would do nothing."
            if verb == "pickup":
                if obj.kind not in _PICKABLE:
                    return f"You cannot pick up the {obj.label}."
                if self.carrying is not None:
                    return f"You are already carrying a {' '.join(self.carrying)}; drop it first."
            if verb == "go through" and obj.kind == _DOOR and obj.state != _OPEN:
                return f"The {obj.label} is not open; use 'toggle and go through {obj.label}'."
            if verb.endswith("go through"):
                if obj.kind != _DOOR:
                    return f"The {obj.label} is not a door."
                if verb.startswith("toggle") and obj.state == _OPEN:
                    return f"The {obj.label} is already open; use 'go through {obj.label}'."
                if obj.state == 2:
                    return f"The {obj.label} is locked; you need to carry a {obj.color} key to open it."
            return f"You cannot {verb} the {obj.label}, as there is no path leading to it that you can see."
        if action == "move forward":
            front = self.front()
            blocker = front.label if front else "wall"
            return f"There is a {blocker} in front of you; you cannot move forward."
        if action == "drop":
            if self.carrying is None:
                return "You cannot drop anything, as you are not carrying anything."
            return "You cannot drop the object here, as the cell in front of you is not empty."
        if action == "toggle":
            return "There is nothing in front of you that can be toggled (a door or a box)."
        return f"'{action}' is not a valid action."
