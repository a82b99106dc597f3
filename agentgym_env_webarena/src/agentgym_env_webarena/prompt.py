"""What the agent reads: the task-independent instruction and the per-step observation.

The observation follows WebArena's template (OBSERVATION / URL / OBJECTIVE / PREVIOUS ACTION),
the format AgentGym's WebArena server sends and AgentGym-RL trains on.
"""

from __future__ import annotations

from typing import Any

__all__ = ["INSTRUCTION", "format_observation"]

INSTRUCTION = """\
You control a web browser to accomplish a task on a website. Each turn you see:
- OBJECTIVE: the task.
- OBSERVATION: the open tabs and the accessibility tree of the visible part of the current page. Every \
element has a numeric id in square brackets, e.g. [12] link 'Skip to content'.
- URL: the address of the current page.
- PREVIOUS ACTION: what you did last (and whether it failed).

Actions:
  click [id]                   click the element with this id
  type [id] [text] [0|1]       clear the field, type the text; Enter is pressed afterwards unless the last argument is 0
  hover [id]                   move the mouse over the element
  press [keys]                 press a key combination, e.g. press [Enter] or press [Control+a]
  scroll [down|up]             scroll the page by about one screen
  new_tab                      open an empty tab
  tab_focus [index]            switch to the tab with this index (tabs are numbered from 0)
  close_tab                    close the current tab
  goto [url]                   open a URL in the current tab
  go_back / go_forward         move through the tab's history
  stop [answer]                finish: put the answer in the brackets when the task asks for information, \
leave them empty otherwise, and write N/A if the task cannot be done

Rules: use only ids from the latest observation; issue exactly one action per turn. Reason briefly, then end \
your reply with "In summary, the next action I will perform is" followed by the action inside triple \
backticks, for example: In summary, the next action I will perform is ```click [12]```
"""


def format_observation(view: dict[str, Any], objective: str, previous_action: str, max_chars: int | None) -> str:
    """WebArena's per-step text: tabs + tree, URL, objective, previous action."""
    tree = view["tree"]
    if max_chars is not None and len(tree) > max_chars:
        tree = tree[:max_chars].rsplit("\n", 1)[0] + "\n... (the rest of the page is cut off; scroll to see more)"
    tabs = " | ".join(view["tabs"])
    return (
        f"OBSERVATION:\n{tabs}\n\n{tree}\n"
        f"URL: {view['url']}\n"
        f"OBJECTIVE: {objective}\n"
        f"PREVIOUS ACTION: {previous_action}"
    )
