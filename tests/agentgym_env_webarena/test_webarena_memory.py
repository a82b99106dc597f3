"""Long-run memory: episodes through the server must not grow its memory or the browser's.

A short run of `bench/webarena_soak.py` (its 1,000-episode run: bench/results/soak_webarena.json).
The direct leak check is that the browser never holds more contexts or pages than there are live
instances, and none of theirs once they close; memory after the warm-up stays within 20%.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SOAK = Path(__file__).parents[2] / "bench" / "webarena_soak.py"


def test_episodes_keep_browser_contexts_bounded_and_memory_flat(monkeypatch):
    monkeypatch.syspath_prepend(str(SOAK.parent))  # the script imports bench/common.py
    spec = importlib.util.spec_from_file_location("webarena_soak", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.soak(20, warmup=10, every=20)  # ~1.5 s an episode here; the soak's 1,000 are the measurement

    assert result["solved"] == result["expected_solved"] == 10  # every navigation episode solved, no answer passes
    contexts, pages = result["contexts_and_pages_before"]
    # one context with one page per live instance (2) after every block; closing them closes theirs
    assert [(s["contexts"], s["pages"]) for s in result["samples"]] == [(contexts + 2, pages + 2)] * 2
    assert result["contexts_and_pages_after_close"] == [contexts, pages]
    assert result["server_rss_growth_pct"] < 20
    assert result["browser_rss_growth_pct"] < 20
