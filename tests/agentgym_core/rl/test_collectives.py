"""Learner-rank collectives by NCCL's rules, checked on gloo ranks under strict collectives.

A GPU run opens its group with NCCL, which refuses CPU tensors; the CPU suite's gloo ranks accept
them, so :mod:`agentgym_core.testing.strict_collectives` makes them refuse what NCCL would.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import collective_ranks
import pytest

from agentgym_core.rl.distributed import host_rendezvous, spawn


def _read(out: Path, rank: int) -> dict:
    return json.loads((out / f"rank{rank}.json").read_text())


def test_strict_collectives_refuse_on_the_device_group_what_nccl_or_its_watchdog_would(tmp_path):
    spawn(collective_ranks.strict_rules, 2, str(tmp_path))
    for rank in (0, 1):
        seen = _read(tmp_path, rank)
        assert "No backend type associated with device type cpu" in seen["tensor_on_device_group"]
        assert "host (gloo) group" in seen["object_on_device_group"]
        assert "host (gloo) group" in seen["barrier_on_device_group"]
        assert (
            seen["tensor_on_host_group"]
            == seen["object_on_host_group"]
            == seen["barrier_on_host_group"]
            == "ran"
        )


def test_update_statistics_are_summed_and_maxima_taken_over_ranks_under_strict_collectives(tmp_path):
    # The update sums its statistics over ranks every mini-batch. A CPU float64 vector all-reduced on
    # the learner's device group crashes on NCCL ("No backend type associated with device type cpu").
    spawn(collective_ranks.stats_sum, 2, str(tmp_path))
    for rank in (0, 1):
        assert _read(tmp_path, rank) == {"tokens": 3.0, "only_0": 1.0, "only_1": 1.0, "largest": 10.0}


def test_ranks_join_a_store_their_launcher_holds_so_no_rank_binds_the_port(tmp_path):
    # Rank 0 used to bind a port the launcher had picked free and closed again; on a busy machine another
    # process took it in between (CI: EADDRINUSE). The launcher now binds the port first and keeps it:
    # nothing else can take it, and the ranks join as clients (a rank that bound it would fail here).
    store = host_rendezvous()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other, pytest.raises(OSError):
        other.bind(("127.0.0.1", store.port))
    spawn(collective_ranks.join_store_on, 2, str(tmp_path), store.port)
    for rank in (0, 1):
        assert _read(tmp_path, rank) == {"port": store.port, "rank_plus_one": 3.0}


@pytest.mark.slow
def test_a_rank_that_never_joins_fails_the_collective_within_the_configured_timeout(tmp_path):
    # 10 s, not less: the same timeout bounds the ranks' rendezvous, which a busy machine can delay
    spawn(collective_ranks.late_rank, 2, str(tmp_path), 10.0)
    seen = _read(tmp_path, 0)
    assert seen["outcome"].startswith("raised"), seen
    assert 9.0 <= seen["seconds"] < 30.0, seen  # failed by the timeout, not sooner and not hung


def test_collective_timeout_is_a_recipe_key_with_help():
    from agentgym_core.recipes import ConfigError
    from agentgym_core.rl.config import TrainerConfig, load_config

    field = TrainerConfig.model_fields["collective_timeout_s"]
    assert field.description
    envs = "envs=[{name: word}]"
    assert load_config(None, [envs, "trainer.collective_timeout_s=90"]).trainer.collective_timeout_s == 90
    with pytest.raises(ConfigError, match="collective_timeout_s"):
        load_config(None, [envs, "trainer.collective_timeout_s=0"])
