"""Shared bits of the SciWorld tests (a plain module: test folders here are not packages)."""

from __future__ import annotations

import os
import shutil

import pytest

from agentgym_env_sciworld import families

requires_java = pytest.mark.skipif(
    shutil.which("java") is None, reason="needs a Java runtime (apt-get install openjdk-17-jre-headless)"
)


def tree_rss_mb(pid: int | None = None) -> float:
    """Resident memory of a process and all its descendants, in MiB (reads /proc)."""
    root = pid or os.getpid()
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, stack = 0.0, [root]
    while stack:
        current = stack.pop()
        stack.extend(children.get(current, []))
        try:
            with open(f"/proc/{current}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def first_test_task_per_family(count: int = 1) -> list[int]:
    """The first ``count`` official test tasks of every family, in family order."""
    out = []
    for fam in families():
        out += [fam.first_task_id + v for v in fam.splits["test"][:count]]
    return out
