"""Trajectory viewer: how long it takes to open a run of 1,000 trajectories.

Writes a synthetic but format-exact run (real ``Trajectory`` objects: the trainer's dump with
token ids, mask and log-probs, ~1.5k tokens and 1-12 turns each, plus a metrics file of --steps
lines), starts ``agentgym view`` as its own process, and measures with headless Chromium (Debian
``chromium``) the time from navigation to the 1,000-row list on screen -- cold (nothing indexed)
and warm -- then opening one trajectory and its token view. The API calls behind them are timed
too. Prints a table and writes bench/results/viewer.json.

    python bench/viewer.py --trajectories 1000
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from agentgym_core.rollout.logs import RolloutLogWriter
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def synthetic_trajectory(rng: random.Random, task_id: int, sample: int) -> Trajectory:
    """A TextCraft-shaped episode: long prompt, 1-12 turns of ~60 sampled tokens."""
    ids: list[int] = [rng.randrange(100, 49000) for _ in range(500)]
    mask, logprobs = [0] * len(ids), [0.0] * len(ids)
    turns, messages = [], [{"role": "system", "content": "You are a crafting agent. " * 20},
                           {"role": "user", "content": "Crafting commands:\n" + "craft 1 x using 2 y\n" * 15}]
    n_turns = rng.randint(1, 12)
    success = rng.random() < 0.3
    for k in range(n_turns):
        start = len(ids)
        ctx = [rng.randrange(100, 49000) for _ in range(rng.randint(20, 60))]
        ids += ctx
        mask += [0] * len(ctx)
        logprobs += [0.0] * len(ctx)
        a0 = len(ids)
        reply = [rng.randrange(100, 49000) for _ in range(rng.randint(30, 90))]
        ids += reply
        mask += [1] * len(reply)
        logprobs += [round(-rng.random() * 4, 4) for _ in reply]
        last = k == n_turns - 1
        text = f"Thought: I need more planks for item {task_id}. Action: get 2 oak planks"
        obs = "Got 2 oak planks" if k % 3 else "Inventory: [oak planks] (4) [stick] (2)"
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": obs}]
        turns.append(Turn(index=k, context_span=Span(start=start, end=a0), action_span=Span(start=a0, end=len(ids)),
                          text=text, action="get 2 oak planks", finish_reason="eos", observation=obs,
                          reward=1.0 if last and success else 0.0, reward_index=len(ids) - 1,
                          success=success if last else None, gen_seconds=0.3, env_seconds=0.001,
                          info={"steps": k + 1, "action": "get", "valid": True}))
    return Trajectory(env="textcraft", task_id=task_id, sample_index=sample, category=f"depth{task_id % 4 + 1}",
                      messages=messages, token_ids=ids, loss_mask=mask, logprobs=logprobs, prompt_length=500,
                      turns=turns, outcome_reward=1.0 if success else 0.0, success=success, terminated=success,
                      truncated=not success, truncation_reason=None if success else "max_turns", max_turns=12,
                      gen_seconds=0.3 * n_turns, env_seconds=0.001 * n_turns, wall_seconds=0.31 * n_turns)


TRAINER_KEYS = ["success", "reward", "turns", "horizon", "failed", "kl_loss", "pg_loss", "clip_frac", "approx_kl",
                "grad_norm", "update_seconds", "update_tokens", "update_tokens_per_s", "optimizer_steps", "lr",
                "trajectories", "trained_trajectories", "sampled_tokens", "entropy", "kl", "rollout_logprob_gap",
                "advantage_abs_mean", "time_rollout", "time_generation", "time_env", "generation_calls", "time_step",
                "textcraft/success", "textcraft/reward", "textcraft/turns"]
EVAL_KEYS = ["success", "reward", "turns", "horizon", "tasks", "failed", "textcraft/success", "textcraft/reward"]


def write_run(run_dir: Path, n: int, steps: int, layout: str) -> Path:
    rng = random.Random(0)
    trajs = [synthetic_trajectory(rng, task_id=k // 8, sample=k % 8) for k in range(n)]
    if layout == "train":
        path = run_dir / "trajectories" / f"step_{steps:06d}.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
        with (run_dir / "metrics.jsonl").open("w") as f:
            for s in range(1, steps + 1):
                # The keys the trainer logs (one chart each), plus an evaluation line every 10 steps.
                f.write(json.dumps({"step": s, "kind": "train", **{k: rng.random() for k in TRAINER_KEYS}}) + "\n")
                if s % 10 == 0:
                    f.write(json.dumps({"step": s, "kind": "eval", **{k: rng.random() for k in EVAL_KEYS}}) + "\n")
    else:  # evaluation layout: rollout log without tokens
        with RolloutLogWriter(run_dir / "trajectories.jsonl") as log:
            log.write_all(trajs)
        path = run_dir / "trajectories.jsonl"
    return path


def start_viewer(run_dir: Path) -> tuple[subprocess.Popen, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agentgym_core.cli", "view", str(run_dir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"agentgym view did not start: {line}{proc.stdout.read()}")
    url = match.group(1)
    while True:
        try:
            httpx.get(f"{url}/api/runs", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.02)
    return proc, url, time.perf_counter() - t0


def time_api(url: str, step: int) -> dict[str, float]:
    def timed(path: str, **params) -> float:
        t0 = time.perf_counter()
        httpx.get(f"{url}{path}", params=params, timeout=60).raise_for_status()
        return time.perf_counter() - t0

    return {"overview_s": timed("/api/run"), "list_cold_s": timed("/api/trajectories", step=step),
            "list_warm_s": timed("/api/trajectories", step=step), "trajectory_s": timed("/api/trajectory", step=step, i=500),
            "tokens_s": timed("/api/tokens", step=step, i=500)}


def time_browser(url: str, n: int, repeats: int) -> dict[str, object]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    out: dict[str, object] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 950})
        opens = []
        for _ in range(repeats):  # the first is cold: the server indexes the step file
            page.goto("about:blank")  # a full page load each time, not a hash change
            t0 = time.perf_counter()
            page.goto(f"{url}/#run=.")
            page.wait_for_function(f"document.querySelectorAll('#list tbody tr').length === {n}", timeout=60_000)
            opens.append(time.perf_counter() - t0)
        out["open_cold_s"], out["open_warm_s"] = opens[0], statistics.median(opens[1:]) if len(opens) > 1 else None
        out["charts"] = page.locator(".chart").count()
        t0 = time.perf_counter()
        page.locator("#list tbody tr").nth(500).click()
        page.wait_for_selector("#detail .turn")
        out["open_trajectory_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        page.click("button[data-view=tokens]")
        page.wait_for_selector("#token-stats")
        out["token_view_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        page.select_option("#filters select[name=success]", "0")
        page.wait_for_function(f"document.querySelectorAll('#list tbody tr').length < {n}")
        out["filter_s"] = time.perf_counter() - t0
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=1000, help="trajectories in the opened step")
    parser.add_argument("--steps", type=int, default=200, help="metrics lines (training curve length)")
    parser.add_argument("--repeats", type=int, default=3, help="page opens (first cold, rest warm)")
    parser.add_argument("--out", default="bench/results/viewer.json", help="where the JSON goes")
    args = parser.parse_args()

    results: dict[str, object] = {"machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
                                  "trajectories": args.trajectories, "layouts": {}}
    for layout in ("train", "eval"):
        with tempfile.TemporaryDirectory(prefix="viewer-bench-") as tmp:
            run_dir = Path(tmp)
            t0 = time.perf_counter()
            path = write_run(run_dir, args.trajectories, args.steps, layout)
            row: dict[str, object] = {"file_mb": round(path.stat().st_size / 1e6, 1),
                                      "write_s": round(time.perf_counter() - t0, 2)}
            step = args.steps if layout == "train" else -1
            proc, url, startup = start_viewer(run_dir)
            try:
                row["server_start_s"] = startup
                if shutil.which("chromium") or Path("/usr/bin/chromium").exists():
                    row.update(time_browser(url, args.trajectories, args.repeats))
                proc_api, url_api, _ = start_viewer(run_dir)  # a fresh server: the API list call is cold
                try:
                    row.update(time_api(url_api, step))
                finally:
                    proc_api.terminate()
                    proc_api.wait(10)
            finally:
                proc.terminate()
                proc.wait(10)
            results["layouts"][layout] = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
    for layout, row in results["layouts"].items():
        print(f"{layout}:")
        for key, value in row.items():
            print(f"  {key:20s} {value}")
    target = results["layouts"]["train"].get("open_cold_s")
    results["open_under_2s"] = target is not None and target < 2.0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
