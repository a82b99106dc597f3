"""A compact text map of the whole BabyAI grid, for viewers (not shown to the agent).

One row per grid row, two characters per cell: the object's kind, then its colour.

=====  ==========================  =====  ==================================
kind   object                      kind   object
=====  ==========================  =====  ==================================
``W``  wall                        ``D``  door (``d`` open, ``L`` locked)
``B``  ball                        ``K``  key
``X``  box                         ``G``  goal square
``V``  lava                        ``>v<^``  the agent, facing east/south/west/north
=====  ==========================  =====  ==================================

Colours: ``r`` red, ``g`` green, ``b`` blue, ``p`` purple, ``y`` yellow, ``e`` grey; an empty
cell is ``..``. The agent's second character is the colour of what it carries (``.`` if nothing).
"""

from __future__ import annotations

from typing import Any

__all__ = ["grid_map"]

_KINDS = {"wall": "W", "ball": "B", "key": "K", "box": "X", "goal": "G", "lava": "V"}
_COLOURS = {"red": "r", "green": "g", "blue": "b", "purple": "p", "yellow": "y", "grey": "e"}
_AGENT = ">v<^"  # minigrid's agent_dir 0..3: east, south, west, north


def _cell(obj: Any) -> str:
    if obj is None:
        return ".."
    if obj.type == "door":
        kind = "L" if obj.is_locked else ("d" if obj.is_open else "D")
    else:
        kind = _KINDS.get(obj.type, "?")
    return kind + _COLOURS.get(obj.color, "?")


def grid_map(game: Any) -> list[str]:
    """The map of a minigrid game (its unwrapped env), rows top to bottom."""
    env = game.unwrapped
    agent_x, agent_y = (int(v) for v in env.agent_pos)
    carrying = env.carrying
    rows = []
    for y in range(env.grid.height):
        cells = []
        for x in range(env.grid.width):
            if (x, y) == (agent_x, agent_y):
                cells.append(_AGENT[env.agent_dir] + (_COLOURS.get(carrying.color, "?") if carrying else "."))
            else:
                cells.append(_cell(env.grid.get(x, y)))
        rows.append("".join(cells))
    return rows
