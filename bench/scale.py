"""Scaling of the training loop, measured in one run: each comparison is one function of this file.

* ``rollout_workers``: 1 vs 2 Ray rollout workers (trainer.launcher=ray, synchronous);
* ``async_vs_sync``: rollout.max_staleness=1 vs 0 (Ray, one learner, one rollout worker);
* ``env_servers``: 1 vs 3 servers of an environment that answers one call at a time (``envs[].urls``).

Every run trains the tiny random model on the example "guess" environment slowed to ``--env-ms``
per step (50 ms by default; reset and step sleep, the way a real simulator or a web page takes
time), served over HTTP by this process. Throughput is trained trajectories per second of the
training loop (the sum of ``time_step`` over the steps after the first, which warms up).

Asynchronous rollouts can at best hide the shorter of the two phases: with a rollout of R seconds
and an update of U seconds per step, the bound is (R + U) / max(R, U). The update is sized with
``--ppo-epochs`` so that U is near R, the case asynchronous rollouts exist for; the JSON records R
and U from the synchronous run next to the speed-up.

    python bench/scale.py                       # all comparisons, writes bench/results/scale.json
    python bench/scale.py --only async_vs_sync

Another comparison is one more function with the signature ``(args, env_url) -> dict`` added to
``COMPARISONS``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_json  # noqa: E402

from agentgym_core.plugins import PluginManager  # noqa: E402
from agentgym_core.rl.config import load_config  # noqa: E402
from agentgym_core.rl.trainer import train  # noqa: E402

PLUGINS = ["guess", "estimators", "transformers"]


def slow_guess_env(env_ms: float, *, one_call_at_a_time: bool = False) -> type:
    """The example env with every reset and step taking ``env_ms`` milliseconds. By default its server
    runs calls in threads, so sleeping instances overlap; ``one_call_at_a_time`` runs them on the
    server's event loop instead, as a single-threaded simulator process would hold its server."""
    from agentgym_env_guess.env import GuessEnv

    class SlowGuessEnv(GuessEnv):
        inline_calls = one_call_at_a_time

        def reset(self, task_id: int, seed: int | None = None) -> Any:
            time.sleep(env_ms / 1000)
            return super().reset(task_id, seed)

        def step(self, action: str) -> Any:
            time.sleep(env_ms / 1000)
            return super().step(action)

    return SlowGuessEnv


def run_training(args: argparse.Namespace, env_url: str | list[str], label: str, *overrides: str,
                 concurrency: int | None = None) -> dict[str, Any]:
    """One training run; its throughput and per-phase times (means over the steps after the first).
    ``env_url`` is one server, or a list of them (a pool); ``concurrency`` overrides ``--concurrency``."""
    where = f"url: '{env_url}'" if isinstance(env_url, str) else f"urls: {json.dumps(env_url)}"
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        run_dir = Path(tmp) / "run"
        config = load_config(None, [
            f"model.path={args.model_dir}", "model.threads=1",
            f"envs=[{{name: guess, {where}, max_concurrency: {concurrency or args.concurrency}}}]",
            f"trainer.run_dir={run_dir}", f"trainer.steps={args.steps}", "trainer.eval_tasks=0",
            "trainer.progress=false", "trainer.tensorboard=false", "trainer.save_trajectories=false",
            f"trainer.save_every={args.steps}", f"rollout.tasks_per_step={args.tasks}", "rollout.group_size=2",
            "rollout.max_new_tokens=8", "rollout.max_total_tokens=512", f"algorithm.rounds_ctrl.rounds={args.rounds}",
            f"algorithm.ppo_epochs={args.ppo_epochs}", "optim.lr=0.0001", "algorithm.kl.coef=0",
            "trainer.launcher=ray", *overrides])
        start = time.perf_counter()
        train(config, plugin_manager=PluginManager(autoload=True, allow=PLUGINS))
        wall = time.perf_counter() - start
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if x["kind"] == "train"][1:]
    seconds = sum(x["time_step"] for x in steps)
    trajectories = sum(x["trajectories"] for x in steps)
    result = {
        "trajectories_per_s": trajectories / seconds,
        "rollout_trajectories_per_s": trajectories / sum(x["time_rollout"] for x in steps),
        "seconds_per_step": seconds / len(steps),
        "rollout_seconds_per_step": sum(x["time_rollout"] for x in steps) / len(steps),
        "staleness_max": max(x["staleness_max"] for x in steps),
        "wall_seconds_with_startup": wall,
    }
    print(f"  {label:<28} {result['trajectories_per_s']:.2f} traj/s, {result['seconds_per_step']:.2f} s/step "
          f"(rollout {result['rollout_seconds_per_step']:.2f} s), staleness max {result['staleness_max']:.0f}",
          flush=True)
    return result


def best_of(args: argparse.Namespace, env_url: str | list[str], label: str, *overrides: str,
            concurrency: int | None = None) -> dict[str, Any]:
    """The fastest of ``--repeats`` runs (other jobs on a shared machine only ever slow a run down)."""
    runs = [run_training(args, env_url, label, *overrides, concurrency=concurrency) for _ in range(args.repeats)]
    return max(runs, key=lambda r: r["trajectories_per_s"])


def compare_rollout_workers(args: argparse.Namespace, env_url: str) -> dict[str, Any]:
    """Synchronous steps with 1 and with 2 rollout workers (the episodes of a step split between them).

    The update is one PPO epoch here, so the step is mostly rollout; ``speedup`` is of the rollout
    phase (trajectories per second of ``time_rollout``), ``step_speedup`` of whole steps.
    """
    one = best_of(args, env_url, "1 rollout worker", "trainer.rollout_workers=1", "algorithm.ppo_epochs=1")
    two = best_of(args, env_url, "2 rollout workers", "trainer.rollout_workers=2", "algorithm.ppo_epochs=1")
    return {"one_worker": one, "two_workers": two,
            "speedup": two["rollout_trajectories_per_s"] / one["rollout_trajectories_per_s"],
            "step_speedup": two["trajectories_per_s"] / one["trajectories_per_s"]}


def compare_async_vs_sync(args: argparse.Namespace, env_url: str) -> dict[str, Any]:
    """rollout.max_staleness 0 (synchronous) vs 1 (the next batch is sampled during the update)."""
    sync = best_of(args, env_url, "synchronous (staleness 0)", "rollout.max_staleness=0")
    asyn = best_of(args, env_url, "asynchronous (staleness 1)", "rollout.max_staleness=1")
    rollout, step = sync["rollout_seconds_per_step"], sync["seconds_per_step"]
    update = step - rollout
    return {"sync": sync, "async": asyn, "speedup": asyn["trajectories_per_s"] / sync["trajectories_per_s"],
            "sync_rollout_seconds": rollout, "sync_update_seconds": update,
            "overlap_bound": step / max(rollout, update)}


def compare_env_servers(args: argparse.Namespace, env_url: str) -> dict[str, Any]:
    """1 vs 3 servers of the env when each server answers one call at a time (``envs[].urls``, a pool).

    The servers are this process's own, the env taking ``--env-ms`` per reset and step on the server's
    event loop; every episode of a step is in flight at once (synchronous, one rollout worker, one PPO
    epoch), so one server queues them and three share them. ``speedup`` is of the rollout phase.
    """
    import contextlib

    from agentgym_core.serving import serve_env

    in_flight = 2 * args.tasks  # every episode of the step
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve_env(slow_guess_env(args.env_ms, one_call_at_a_time=True), {},
                                              max_instances=64)) for _ in range(3)]
        one = best_of(args, urls[:1], "1 env server", "algorithm.ppo_epochs=1", concurrency=in_flight)
        three = best_of(args, urls, "3 env servers", "algorithm.ppo_epochs=1", concurrency=in_flight)
    return {"one_server": one, "three_servers": three,
            "speedup": three["rollout_trajectories_per_s"] / one["rollout_trajectories_per_s"],
            "step_speedup": three["trajectories_per_s"] / one["trajectories_per_s"]}


COMPARISONS: dict[str, Callable[[argparse.Namespace, str], dict[str, Any]]] = {
    "rollout_workers": compare_rollout_workers,
    "async_vs_sync": compare_async_vs_sync,
    "env_servers": compare_env_servers,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(COMPARISONS), help="Comparisons to run (default: all).")
    parser.add_argument("--env-ms", type=float, default=50.0, help="Milliseconds per env reset and step.")
    parser.add_argument("--steps", type=int, default=4, help="Training steps per run (the first is not timed).")
    parser.add_argument("--tasks", type=int, default=4, help="rollout.tasks_per_step (2 samples each).")
    parser.add_argument("--rounds", type=int, default=3, help="Turns per episode.")
    parser.add_argument("--concurrency", type=int, default=2, help="Live episodes per rollout worker.")
    parser.add_argument("--ppo-epochs", type=int, default=18, help="Update passes per step (sizes the update).")
    parser.add_argument("--repeats", type=int, default=2, help="Runs per setting; the fastest counts.")
    parser.add_argument("--cpus", type=int, default=4, help="CPUs of the private Ray.")
    parser.add_argument("--out", default="bench/results/scale.json")
    args = parser.parse_args()

    import ray

    from agentgym_core.serving import serve_env
    from agentgym_core.testing.tiny_model import tiny_chat_model

    os.environ.update(AGENTGYM_DISABLE_PLUGIN_AUTOLOAD="0", AGENTGYM_PLUGINS=",".join(PLUGINS),
                      RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="disabled",
                      # Ray's memory monitor kills workers when the node is above 95% memory; on a shared
                      # machine that is other people's memory, so the bench leaves it to the kernel.
                      RAY_memory_monitor_refresh_ms="0")
    with tempfile.TemporaryDirectory(prefix="rs") as tmp, \
            serve_env(slow_guess_env(args.env_ms), {}, max_instances=64) as env_url:
        args.model_dir = Path(tmp) / "tiny"
        model, tokenizer = tiny_chat_model(seed=0)
        model.save_pretrained(args.model_dir)
        tokenizer.save_pretrained(args.model_dir)
        ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, _temp_dir=str(Path(tmp) / "ray"),
                 log_to_driver=False)
        results: dict[str, Any] = {}
        try:
            for name in args.only or COMPARISONS:
                print(f"{name}:", flush=True)
                results[name] = COMPARISONS[name](args, env_url)
                print(f"  speed-up x{results[name]['speedup']:.2f}", flush=True)
        finally:
            ray.shutdown()
    settings = {k: v for k, v in vars(args).items() if k not in ("model_dir", "out")}
    print(f"wrote {write_json(args.out, {'settings': settings, 'cpu_count': os.cpu_count(), **results})}")


if __name__ == "__main__":
    main()
