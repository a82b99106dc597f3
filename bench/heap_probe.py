"""Where a run's resident memory sits: the `agentgym` command in this process, with glibc's counters sampled.

A background thread reads, four times a second, the process's RSS and glibc's ``mallinfo2``: the heap's
address space (``arena``, all arenas), the part of it in use (``uordblks``), the free part (``fordblks``:
resident only until trimmed) and the large blocks mapped on their own (``hblkhd``). For every 30 s window
it writes the sample with the highest RSS as one JSON line, so a long run's file stays small. A wide
free part beside a high RSS is fragmentation that trimming returns; in-use memory near the RSS is live
data. glibc only (Linux).

    python bench/heap_probe.py --out heap.jsonl -- train examples/babyai_grpo_cpu.yaml

(The main job's run of 2026-11-26 in the README ran under this probe.)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import threading
import time
from pathlib import Path


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (``man mallinfo2``)."""

    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def sample_forever(out: Path, every_s: float = 0.25, window_s: float = 30.0) -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    with out.open("w") as f:
        best, started = None, time.time()
        while True:
            info = libc.mallinfo2()
            row = {"t": round(time.time(), 1), "rss_gb": _rss_bytes() / 1e9, "heap_gb": info.arena / 1e9,
                   "in_use_gb": info.uordblks / 1e9, "free_gb": info.fordblks / 1e9, "mapped_gb": info.hblkhd / 1e9,
                   "threads": threading.active_count()}
            if best is None or row["rss_gb"] > best["rss_gb"]:
                best = row
            if time.time() - started >= window_s:
                f.write(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in best.items()}) + "\n")
                f.flush()
                best, started = None, time.time()
            time.sleep(every_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("heap_probe.jsonl"), help="samples, one JSON line per 30 s")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the agentgym command's arguments")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the agentgym command after --, e.g. -- train examples/babyai_grpo_cpu.yaml")
    threading.Thread(target=sample_forever, args=(args.out,), daemon=True, name="heap-probe").start()
    from agentgym_core.cli import main as agentgym

    sys.argv = ["agentgym", *command]
    return agentgym()


if __name__ == "__main__":
    raise SystemExit(main())
