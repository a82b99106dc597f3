"""A stand-in for AgentGym's TextCraft server, shaped like it, for throughput comparisons.

AgentGym's own server (agentenv-textcraft) is not installable here, so this reproduces its
serving shape around our TextCraft game: FastAPI with pydantic bodies, ``async`` /create and plain
(thread-pool) /step and /reset handlers over a dict of environments, a ``print`` per request, one
uvicorn process with default settings. It is a baseline for the HTTP layer, not the anchor's game
logic (whose resets are slower still: it re-walks and grows its recipe lists on every reset).

    python bench/anchor_standin.py --port 8011
"""

from __future__ import annotations

import argparse

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from agentgym_env_textcraft import TextCraftEnv


class StepBody(BaseModel):
    id: int
    action: str


class ResetBody(BaseModel):
    id: int
    data_idx: int = 0


def build_app() -> FastAPI:
    app = FastAPI()
    envs: dict[int, TextCraftEnv] = {}
    state = {"next": 0}

    @app.post("/create")
    async def create() -> dict:
        index = state["next"]
        env = envs[index] = TextCraftEnv()
        state["next"] += 1
        observation = env.reset(index % 544).observation
        print(f"-------Env {index} created--------")
        return {"id": index, "observation": observation, "done": False, "reward": 0}

    @app.post("/step")
    def step(body: StepBody) -> dict:
        print(f"/step {body.id} {body.action}")
        try:
            result = envs[body.id].step(body.action)
            return {"observation": result.observation, "reward": result.reward, "done": result.done}
        except Exception as exc:
            return {"error": str(exc)}

    @app.post("/reset")
    def reset(body: ResetBody) -> dict:
        print(f"/reset {body.id} {body.data_idx}")
        try:
            observation = envs[body.id].reset(body.data_idx % 544).observation
            return {"id": body.id, "observation": observation, "done": False, "reward": 0}
        except Exception as exc:
            return {"error": str(exc)}

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8011)
    args = parser.parse_args()
    uvicorn.run(build_app(), host="127.0.0.1", port=args.port, log_level="warning")
