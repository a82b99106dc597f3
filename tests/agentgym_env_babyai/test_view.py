"""The text view: wording, numbering, planning over visible cells, refusal messages."""

from __future__ import annotations

from agentgym_env_babyai.view import FORWARD, LEFT, PICKUP, RIGHT, TOGGLE, View

EMPTY, WALL, UNSEEN = [1, 0, 0], [2, 5, 0], [0, 0, 0]
RED, GREEN, BLUE, YELLOW, GREY = 0, 1, 2, 4, 5
BALL, KEY, BOX, DOOR = 6, 5, 7, 4


def grid(**cells):
    """A 7x7 egocentric view (x = column, y = row, agent at (3, 6) facing up); `cells` maps
    'x_y' to an encoded cell. Row 2 is a wall, rows 0-1 are unseen beyond it."""
    g = [[list(EMPTY) for _ in range(7)] for _ in range(7)]
    for x in range(7):
        g[x][2] = list(WALL)
        g[x][0] = g[x][1] = list(UNSEEN)
    for key, cell in cells.items():
        x, y = map(int, key.split("_"))
        g[x][y] = list(cell)
    return g


def test_anchor_sentence():
    view = View(grid(**{"2_3": [BALL, RED, 0]}), None)
    assert view.description == (
        "In front of you in this room, you can see several objects: There is a red ball 1 3 steps in "
        "front of you and 1 steps to your left. The room has walls around you. You are facing a wall "
        "4 steps away. You are not carrying anything."
    )
    assert list(view.actions)[:5] == [
        "turn left",
        "turn right",
        "move forward",
        "go to red ball 1",
        "pickup red ball 1",
    ]


def test_same_name_objects_are_numbered_nearest_first_and_carrying_is_said():
    view = View(grid(**{"3_3": [BALL, RED, 0], "4_5": [BALL, RED, 0]}), ("green", "key"))
    assert "There is a red ball 1 1 steps in front of you and 1 steps to your right." in view.description
    assert "There is a red ball 2 right in front of you 3 steps away." in view.description
    assert view.description.endswith("You are carrying a green key.")
    # carrying: no pickup offered, and the explanation says why
    assert "pickup red ball 1" not in view.actions
    assert "already carrying a green key" in view.explain("pickup red ball 1")


def test_go_to_plans_the_shortest_visible_path_and_pickup_adds_the_pickup():
    view = View(grid(**{"5_4": [KEY, YELLOW, 0]}), None)  # 2 ahead, 2 right
    plan = view.actions["go to yellow key 1"]
    # Either forward x2 then turn right + forward, or the mirror; 4 primitives and facing the key.
    assert len(plan) == 4 and plan.count(FORWARD) == 3 and plan.count(RIGHT) == 1
    assert view.actions["pickup yellow key 1"] == (*plan, PICKUP)


def test_object_behind_obstacles_is_unreachable_and_explained():
    # A ball enclosed by boxes on every side the agent could reach it from.
    walls = {"0_4": [BOX, GREY, 0], "1_3": [BOX, GREY, 0], "1_5": [BOX, GREY, 0], "2_4": [BOX, GREY, 0]}
    view = View(grid(**{"1_4": [BALL, BLUE, 0], **walls}), None)
    assert "go to blue ball 1" not in view.actions
    assert "no path leading to it" in view.explain("go to blue ball 1")
    assert view.explain("go to purple ball 1") == "There is no purple ball 1 in sight."


def test_doors_offer_the_right_macros():
    closed = View(grid(**{"3_2": [DOOR, RED, 1]}), None)
    assert closed.actions["toggle and go through red closed door 1"] == (
        FORWARD,
        FORWARD,
        FORWARD,
        TOGGLE,
        FORWARD,
        FORWARD,
    )
    assert "go through red closed door 1" not in closed.actions
    assert "toggle and go through" in closed.explain("go through red closed door 1")

    locked = View(grid(**{"3_2": [DOOR, RED, 2]}), None)
    assert "toggle and go through red locked door 1" not in locked.actions
    assert "need to carry a red key" in locked.explain("toggle and go through red locked door 1")
    with_key = View(grid(**{"3_2": [DOOR, RED, 2]}), ("red", "key"))
    assert "toggle and go through red locked door 1" in with_key.actions

    opened = View(grid(**{"3_2": [DOOR, RED, 0]}), None)
    assert opened.actions["go through red open door 1"][-2:] == (FORWARD, FORWARD)


def test_front_only_actions():
    blocked = View(grid(**{"3_5": [BOX, GREY, 0]}), None)
    assert "move forward" not in blocked.actions
    assert (
        blocked.explain("move forward") == "There is a grey box 1 in front of you; you cannot move forward."
    )
    assert blocked.actions["toggle"] == (TOGGLE,)
    carrying = View(grid(), ("red", "ball"))
    assert "drop" in carrying.actions and "toggle" not in carrying.actions
    assert "not carrying anything" in View(grid(), None).explain("drop")
    assert View(grid(), None).explain("dance") == "'dance' is not a valid action."
    assert View(grid(), None).actions["turn left"] == (LEFT,)


def test_nothing_in_sight():
    assert View(grid(), None).description.startswith("You cannot see any objects within sight.")
