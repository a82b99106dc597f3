"""docs/how-to/multi-gpu.md's torchrun line, on 2 CPU ranks: every torchrun rank runs `agentgym train`, and
rank 0 alone reports. Rank 1 used to print a table of its own and overwrite summary.json with a summary
that held no evaluation (its driver is a do-nothing one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_torchrun_two_ranks_report_once_with_rank_zeros_evaluation(tmp_path, tiny_model_dir, one_rl_step):
    env = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    env.update(AGENTGYM_STRICT_COLLECTIVES="cuda", OMP_NUM_THREADS="1")
    recipe = tmp_path / "guess.yaml"
    recipe.write_text("envs: [{name: guess}]\n")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "agentgym_core",
               "train", str(recipe), f"model.path={tiny_model_dir}", "model.device=cpu",
               "trainer.learners=2", *one_rl_step(eval_tasks=3, tasks_per_step=2)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("run directory:") == 1, done.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["tasks"] == 3 and summary["paired"]["n_tasks"] == 3
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r.get("kind") != "eval" and "trajectories" in r]
    assert trained[0]["rollout_episodes/worker0"] == trained[0]["rollout_episodes/worker1"] == 2


@pytest.mark.parametrize(("override", "said"), [
    ("trainer.learners=3", "torchrun started 2 ranks but trainer.learners=3"),
    ("model.path=/nowhere/no-model", "/nowhere/no-model"),
])
def test_a_setup_error_under_torchrun_is_said_once_in_one_line_before_any_model_loads(tmp_path, override, said):
    env = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}
    env.update(OMP_NUM_THREADS="1")
    recipe = tmp_path / "guess.yaml"
    recipe.write_text("envs: [{name: guess}]\nmodel: {path: smollm2-135m-instruct, device: cpu}\ntrainer: {learners: 2}\n")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "agentgym_core",
               "train", str(recipe), override, f"trainer.run_dir={tmp_path / 'run'}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("agentgym:")]
    assert len(ours) == 1 and said in ours[0], done.stderr[-3000:]
    assert not (tmp_path / "run").exists()  # refused before the run directory, a warm start or a model
