"""The 25 ScienceWorld action templates and the instruction prompt built from them.

The engine knows 26 templates; ``reset task`` is left out because an episode restart is the
trainer's decision, not the agent's (it would also let an agent erase a failure). An input that
starts with it is answered as an invalid action.
"""

from __future__ import annotations

__all__ = ["ACTION_TEMPLATES", "INSTRUCTION", "invalid_action_message"]

#: (template, what it does), in the engine's vocabulary (OBJ / LOC are object and place names).
ACTION_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("open OBJ", "open a container or door"),
    ("close OBJ", "close a container or door"),
    ("activate OBJ", "switch a device on"),
    ("deactivate OBJ", "switch a device off"),
    ("connect OBJ to OBJ", "connect two electrical terminals"),
    ("disconnect OBJ", "disconnect an electrical component"),
    ("use OBJ on OBJ", "use a device or tool on something"),
    ("look around", "describe the room you are in"),
    ("look at OBJ", "describe an object in detail"),
    ("look in OBJ", "describe what a container holds"),
    ("read OBJ", "read a book or note"),
    ("move OBJ to OBJ", "move an object into a container or place"),
    ("pick up OBJ", "put an object in your inventory"),
    ("put down OBJ", "drop an object from your inventory"),
    ("pour OBJ in OBJ", "pour a liquid into a container"),
    ("dunk OBJ in OBJ", "dunk a container into a liquid"),
    ("mix OBJ", "chemically mix what a container holds"),
    ("go to LOC", "move to a neighbouring location (its door must be open)"),
    ("eat OBJ", "eat a food"),
    ("flush OBJ", "flush a toilet"),
    ("focus on OBJ", "declare the object the task is about (a wrong focus can fail the task)"),
    ("wait", "do nothing for 10 time steps"),
    ("wait1", "do nothing for 1 time step"),
    ("task", "repeat the task description"),
    ("inventory", "list what you carry"),
)

INSTRUCTION = (
    "You are an agent in ScienceWorld, a text-based simulation of a house with rooms, devices, "
    "substances, plants and animals. Each turn you read an observation and reply with one action that "
    "moves you towards the task. The task description comes first in the first observation.\n\n"
    "Actions (OBJ and LOC are names of things and places you can see):\n"
    + "\n".join(f"- {template}: {doc}" for template, doc in ACTION_TEMPLATES)
    + "\n\nWhen the game asks you to choose between ambiguous objects, reply with the number of your choice "
    "(for example `0`).\n\n"
    "Reply in this format:\nThought: your reasoning about what to do next.\nAction: the single action to take"
)

_TEMPLATE_LIST = ", ".join(template for template, _ in ACTION_TEMPLATES)


def invalid_action_message(action: str, engine_answer: str) -> str:
    """The observation for an action the engine did not understand, saying how to fix it."""
    shown = action if len(action) <= 120 else action[:117] + "..."
    return (
        f"Invalid action {shown!r}: {engine_answer.strip()} "
        f"Use one of these forms with names from the observation: {_TEMPLATE_LIST}."
    )
