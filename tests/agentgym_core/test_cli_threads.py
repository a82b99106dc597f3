"""The `agentgym` command's CPU thread default: half the CPUs (bench/threads.py), unless the user sets it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

SCRIPT = "from agentgym_core.cli import main; main(['envs']); import torch; print(torch.get_num_threads())"


def threads_after_cli(extra_env: dict[str, str]) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(extra_env)
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.strip().splitlines()[-1])


def test_default_is_half_the_cpus_and_omp_num_threads_wins():
    cpus = len(os.sched_getaffinity(0))
    assert threads_after_cli({}) == max(1, cpus // 2)
    assert threads_after_cli({"OMP_NUM_THREADS": str(cpus)}) == cpus  # torch's own default, asked for
