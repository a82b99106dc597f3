"""Helpers shared by the WebArena plugin tests."""

from __future__ import annotations

import re


def element_id(observation: str, role: str, name: str) -> int:
    """The id the observation shows for the element with this role and accessible name."""
    match = re.search(rf"\[(\d+)\] {re.escape(role)} ['\"]{re.escape(name)}['\"]", observation)
    assert match, f"no {role} {name!r} in the observation:\n{observation}"
    return int(match.group(1))


def solve_shop_price_task(env, task_id: int = 0, product: str = "Olive Desk Lamp", answer: str | None = None):
    """Scripted agent: search the shop, open the product, answer with its price (or `answer`)."""
    obs = env.reset(task_id).observation
    box = element_id(obs, "searchbox", "Search products")
    obs = env.step(f"I will search. In summary, the next action I will perform is ```type [{box}] [{product}] [1]```").observation
    assert "results for" in obs, obs
    link = element_id(obs, "link", product)
    obs = env.step(f"In summary, the next action I will perform is ```click [{link}]```").observation
    price = re.search(r"StaticText '(\$\d+\.\d\d)'", obs)
    assert price, obs
    return env.step(f"In summary, the next action I will perform is ```stop [{answer or price.group(1)}]```")


def solve_navigation_task(env, task_id: int = 2, forum: str = "gardening"):
    """Scripted agent for the forum navigation task: click the forum's link, then stop."""
    obs = env.reset(task_id).observation
    link = element_id(obs, "link", forum)
    env.step(f"```click [{link}]```")
    return env.step("```stop []```")
