"""Rank functions for the collective tests (module level, so spawned ranks can import them)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def stats_sum(out_dir: str) -> None:
    """Join the group under strict collectives and sum one statistic per rank, as the update does."""
    from agentgym_core.rl.distributed import all_reduce_max, all_reduce_stats, init_from_environment
    from agentgym_core.testing.strict_collectives import install

    install("cuda")
    ctx = init_from_environment("cpu")
    summed = all_reduce_stats({"tokens": float(ctx.rank + 1), f"only_{ctx.rank}": 1.0}, ctx)
    summed["largest"] = all_reduce_max(10.0 - ctx.rank, ctx)  # a maximum (sampler_ratio_max) is not summed
    Path(out_dir, f"rank{ctx.rank}.json").write_text(json.dumps(summed))


def join_store_on(out_dir: str, port: int) -> None:
    """Join the group through the store at ``port`` on loopback (held by the test) and sum each rank's number."""
    from agentgym_core.rl.distributed import all_reduce_stats, init_from_environment

    os.environ["MASTER_PORT"] = str(port)
    ctx = init_from_environment("cpu")
    summed = all_reduce_stats({"rank_plus_one": float(ctx.rank + 1)}, ctx)
    Path(out_dir, f"rank{ctx.rank}.json").write_text(json.dumps({"port": port, **summed}))


def strict_rules(out_dir: str) -> None:
    """What strict collectives let through on the default (device) group and on a gloo (host) group."""
    import torch
    import torch.distributed as dist

    from agentgym_core.testing.strict_collectives import StrictCollectiveError, install

    install("cuda")
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    host = dist.new_group(backend="gloo")
    seen = {}
    for label, call in {
        "tensor_on_device_group": lambda: dist.all_reduce(torch.ones(1)),
        "object_on_device_group": lambda: dist.all_gather_object([None, None], rank),
        "barrier_on_device_group": lambda: dist.barrier(),
        "tensor_on_host_group": lambda: dist.all_reduce(torch.ones(1), group=host),
        "object_on_host_group": lambda: dist.all_gather_object([None, None], rank, group=host),
        "barrier_on_host_group": lambda: dist.barrier(group=host),
    }.items():
        try:
            call()
            seen[label] = "ran"
        except StrictCollectiveError as exc:
            seen[label] = str(exc)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(seen))


def late_rank(out_dir: str, timeout_s: float) -> None:
    """Rank 1 never reaches the collective until rank 0 is done with it: rank 0 must fail, not hang.

    The timeout also bounds joining the group, so it must outlast the two ranks' start-up skew on a
    busy machine (importing torch there can take seconds). Rank 1 waits for rank 0's result file
    rather than sleeping a fixed multiple of the timeout, capped so a hung rank 0 still ends the test.
    """
    from agentgym_core.rl.distributed import all_reduce_stats, init_from_environment

    ctx = init_from_environment("cpu", timeout_s=timeout_s)
    result = Path(out_dir, "rank0.json")
    if ctx.rank == 1:
        deadline = time.monotonic() + 120.0
        while not result.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    start = time.perf_counter()
    try:
        all_reduce_stats({"x": 1.0}, ctx)
        outcome = "returned"
    except RuntimeError as exc:
        outcome = f"raised: {type(exc).__name__}"
    partial = result.with_suffix(".part")  # written whole, then renamed: rank 1 never reads half a file
    partial.write_text(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - start}))
    partial.replace(result)
