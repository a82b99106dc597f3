"""The viewer's map of the whole grid in step info."""

from __future__ import annotations

from agentgym_env_babyai import BabyAIEnv


def test_grid_map_shows_walls_objects_and_the_turning_agent():
    env = BabyAIEnv()
    first = env.reset(1804)
    game = env._game.unwrapped
    grid = first.info["grid"]
    assert len(grid) == game.grid.height and all(len(row) == 2 * game.grid.width for row in grid)
    assert set(grid[0][::2]) == {"W"}  # the outer wall
    def agent_char(rows):
        x, y = (int(v) for v in game.agent_pos)
        return rows[y][2 * x]
    assert agent_char(grid) == ">v<^"[game.agent_dir]
    turned = env.step("turn left").info["grid"]
    assert agent_char(turned) == ">v<^"[game.agent_dir] != agent_char(grid)
    env.close()


def test_grid_can_be_left_out():
    env = BabyAIEnv(grid_in_info=False)
    assert "grid" not in env.reset(1804).info
    assert "grid" not in env.step("turn left").info
    env.close()
