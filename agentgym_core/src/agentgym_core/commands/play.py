"""`agentgym play ENV --task N`: play a task yourself in the terminal."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "play", help="play an environment task yourself in the terminal",
        description="Play one task as the agent would: read the observation, type an action, repeat. "
                    "Type 'actions' to list available actions and 'quit' to stop.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("env", help="environment name (see `agentgym envs`)")
    parser.add_argument("--task", type=int, default=None, help="task id (default: the first test task)")
    parser.add_argument("--seed", type=int, default=None, help="seed for the task")
    parser.add_argument("--env-url", default=None, help="play against a running server instead of in-process")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdin=None, stdout=None) -> int:
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    from agentgym_core.http.opening import env_factory  # here: `agentgym --help` imports every command module

    env = env_factory(args.env, url=args.env_url)()
    try:
        task = args.task if args.task is not None else env.tasks().split("test")[0]
        print(env.instruction, file=stdout)
        print(f"\n=== task {task} ===\n{env.reset(task, args.seed).observation}", file=stdout)
        total, steps = 0.0, 0
        while True:
            print("> ", end="", file=stdout, flush=True)
            line = stdin.readline()
            if not line or line.strip() == "quit":
                print("\nstopped.", file=stdout)
                return 0
            text = line.strip()
            if text == "actions":
                print(env.available_actions() or "this environment does not list its actions", file=stdout)
                continue
            result = env.step(env.parse_action(text))
            steps, total = steps + 1, total + result.reward
            print(result.observation, file=stdout)
            if result.done:
                outcome = {True: "success", False: "failure", None: "ended"}[result.success]
                how = "terminated" if result.terminated else "truncated"
                print(f"\n=== {outcome} ({how}) after {steps} steps, reward {total:g} ===", file=stdout)
                return 0
    finally:
        env.close()
