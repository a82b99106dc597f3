"""release_memory: what a finished phase freed leaves the process's resident memory."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

# Run in a fresh interpreter: glibc's mmap threshold adapts to everything the process freed before
# (the rest of the suite), and the check needs its first, predictable state.
_SCENARIO = textwrap.dedent("""
    from pathlib import Path
    import torch
    from agentgym_core.training.memory import release_memory

    def rss_mb():
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20

    release_memory()
    big = torch.ones(30 * 2**20, dtype=torch.uint8)  # freeing an mmapped 30 MB block raises glibc's mmap
    del big  # threshold to 30 MB: the 8 MB blocks below then come from the heap, as a rollout's do
    blocks = [torch.ones(8 * 2**20, dtype=torch.uint8) for _ in range(40)]
    keep = torch.ones(8 * 2**20, dtype=torch.uint8)  # above them: the heap's top cannot shrink on its own
    before = rss_mb()
    del blocks
    kept = rss_mb()
    assert kept > before - 100, f"glibc returned the blocks by itself ({before:.0f} -> {kept:.0f} MB)"
    assert release_memory() is True
    after = rss_mb()
    assert after < kept - 250, f"release_memory freed only {kept - after:.0f} of 320 MB"
    assert int(keep.sum()) == keep.numel()  # the live block is intact
""")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_memory_freed_inside_the_heap_goes_back_to_the_os():
    done = subprocess.run([sys.executable, "-c", _SCENARIO], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


_PHASES = textwrap.dedent("""
    import torch
    from agentgym_core.training.memory import PhasePeak, peak_rss_bytes

    with PhasePeak() as big:
        block = torch.ones(400 * 2**20, dtype=torch.uint8)  # 400 MB, touched
        del block
    with PhasePeak() as small:
        block = torch.ones(20 * 2**20, dtype=torch.uint8)
        del block
    assert big.gb - small.gb > 0.3, (big.gb, small.gb)  # the second phase does not inherit the first's peak
    assert 0 < small.bytes <= peak_rss_bytes() + 50 * 2**20
""")


@pytest.mark.skipif(platform.system() != "Linux", reason="phase peaks reset the high-water mark through /proc")
def test_each_phase_measures_its_own_peak_resident_memory():
    done = subprocess.run([sys.executable, "-c", _PHASES], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_phase_without_cuda_reports_no_gpu_peak():
    """Without CUDA in use, phases report resident memory only (and never initialise CUDA to find out)."""
    import torch

    from agentgym_core.training.memory import PhasePeak

    if torch.cuda.is_initialized():
        pytest.skip("this process already uses CUDA")
    with PhasePeak() as peak:
        torch.ones(1000).sum()
    assert peak.gpu_gb is None and set(peak.as_metrics("_update")) == {"peak_rss_update_gb"}
    assert not torch.cuda.is_initialized()


# The same heap as above: blocks freed below a live one stay resident until trimmed; here nothing but
# the trimmer's thread trims, while the main thread sleeps.
_TRIMMER = textwrap.dedent("""
    import time
    from pathlib import Path
    import torch
    from agentgym_core.training.memory import HeapTrimmer, release_memory

    def rss_mb():
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20

    release_memory()
    big = torch.ones(30 * 2**20, dtype=torch.uint8)
    del big
    blocks = [torch.ones(8 * 2**20, dtype=torch.uint8) for _ in range(40)]
    keep = torch.ones(8 * 2**20, dtype=torch.uint8)
    with HeapTrimmer(None):  # off: no thread, nothing returned
        assert not HeapTrimmer.running()
        del blocks
        time.sleep(0.3)
        kept = rss_mb()
    with HeapTrimmer(0.05):
        with HeapTrimmer(10.0):  # nested (a warm start's loop inside a recipe): the same thread
            assert HeapTrimmer.running()
        assert HeapTrimmer.running()
        time.sleep(0.5)
        after = rss_mb()
    assert not HeapTrimmer.running()
    assert after < kept - 250, f"the trimmer freed only {kept - after:.0f} of 320 MB"
    assert int(keep.sum()) == keep.numel()
""")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_heap_trimmer_returns_free_heap_pages_while_the_phase_runs():
    done = subprocess.run([sys.executable, "-c", _TRIMMER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_trim_interval_that_would_trim_continuously_is_refused_with_what_to_use():
    from agentgym_core.recipes import ConfigError
    from agentgym_core.rl.config import load_config

    envs = "envs=[{name: babyai}]"
    assert load_config(None, [envs, "runtime.heap_trim_interval_s=0"]).runtime.heap_trim_interval_s == 0
    with pytest.raises(ConfigError, match="at least 0.05"):
        load_config(None, [envs, "runtime.heap_trim_interval_s=0.001"])


def test_expandable_cuda_segments_are_preferred_unless_the_user_configured_the_allocator(monkeypatch):
    """The variable is set where the backend allows it; a user's setting (even empty) and a backend that declares
    it cannot work with expandable segments (vLLM) are left alone."""
    import torch

    from agentgym_core.training.memory import CUDA_ALLOCATOR_VARIABLES, prefer_expandable_cuda_segments

    if torch.cuda.is_initialized():
        pytest.skip("this process already uses CUDA")
    for name in CUDA_ALLOCATOR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert prefer_expandable_cuda_segments(False) is False  # vLLM: its sleep mode's pool refuses them
    assert not any(name in os.environ for name in CUDA_ALLOCATOR_VARIABLES)
    assert prefer_expandable_cuda_segments(True) is True
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"

    for name, value in [("PYTORCH_CUDA_ALLOC_CONF", ""), ("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.6")]:
        for other in CUDA_ALLOCATOR_VARIABLES:
            monkeypatch.delenv(other, raising=False)
        monkeypatch.setenv(name, value)
        assert prefer_expandable_cuda_segments(True) is False
        assert os.environ[name] == value
        assert all(os.environ.get(o) is None for o in CUDA_ALLOCATOR_VARIABLES if o != name)


def test_onednn_primitive_cache_limit_caps_both_caches_and_leaves_a_users_setting_alone(monkeypatch):
    from agentgym_core.training.memory import (
        IDEEP_CACHE_VARIABLE,
        ONEDNN_CACHE_VARIABLE,
        limit_onednn_primitive_cache,
    )

    monkeypatch.delenv(ONEDNN_CACHE_VARIABLE, raising=False)
    monkeypatch.delenv(IDEEP_CACHE_VARIABLE, raising=False)
    assert limit_onednn_primitive_cache(32) is True
    assert os.environ[ONEDNN_CACHE_VARIABLE] == os.environ[IDEEP_CACHE_VARIABLE] == "32"
    monkeypatch.setenv(ONEDNN_CACHE_VARIABLE, "2048")
    monkeypatch.delenv(IDEEP_CACHE_VARIABLE)
    assert limit_onednn_primitive_cache(16) is True  # the one the user left unset
    assert (os.environ[ONEDNN_CACHE_VARIABLE], os.environ[IDEEP_CACHE_VARIABLE]) == ("2048", "16")
    assert limit_onednn_primitive_cache(32) is False
    assert (os.environ[ONEDNN_CACHE_VARIABLE], os.environ[IDEEP_CACHE_VARIABLE]) == ("2048", "16")
    with pytest.raises(ValueError, match="at least 1"):
        limit_onednn_primitive_cache(0)


def test_model_config_limits_the_onednn_cache_when_the_policy_loads(monkeypatch, tmp_path):
    from agentgym_core.rl.config import ModelConfig, RuntimeConfig
    from agentgym_core.rl.policy import load_policy
    from agentgym_core.testing.tiny_model import tiny_chat_model
    from agentgym_core.training.memory import IDEEP_CACHE_VARIABLE, ONEDNN_CACHE_VARIABLE

    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    monkeypatch.delenv(ONEDNN_CACHE_VARIABLE, raising=False)
    monkeypatch.delenv(IDEEP_CACHE_VARIABLE, raising=False)
    load_policy(ModelConfig(path=str(tmp_path)))
    assert ONEDNN_CACHE_VARIABLE not in os.environ and IDEEP_CACHE_VARIABLE not in os.environ  # the defaults
    load_policy(ModelConfig(path=str(tmp_path)), runtime=RuntimeConfig(onednn_primitive_cache=32))
    assert os.environ[ONEDNN_CACHE_VARIABLE] == os.environ[IDEEP_CACHE_VARIABLE] == "32"


def _rss_growth_mb(scenario: str, argument: str, env: dict[str, str] | None = None) -> float:
    """The RSS growth in MB that ``scenario`` prints, run in a fresh interpreter with neither cache variable
    set except as ``env`` says."""
    base = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
    done = subprocess.run([sys.executable, "-c", scenario, argument], env=base | (env or {}), capture_output=True,
                          text=True, timeout=120, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def _keep_smaller(growth: dict[str, float], name: str, measured: float) -> None:
    """The smaller of the measurements is kept: the allocator adds noise, never takes memory away."""
    growth[name] = min(growth.get(name, measured), measured)


# A fresh interpreter that imports torch, then limits the cache (as load_policy does, after the import),
# then runs bf16 matmuls of 200 different lengths, as training forwards do: prints the RSS growth in MB.
_ONEDNN_SCENARIO = textwrap.dedent("""
    import sys
    from pathlib import Path
    import torch
    from agentgym_core.training.memory import limit_onednn_primitive_cache

    if sys.argv[1] != "default":
        limit_onednn_primitive_cache(int(sys.argv[1]))
    torch.set_num_threads(1)
    rss = lambda: int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20
    weight = torch.randn(576, 1536)
    start = rss()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for n in range(300, 900, 3):
            (torch.randn(n, 576) @ weight).sum()
    print(rss() - start)
""")


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc")
def test_a_small_onednn_cache_stops_rss_growing_with_every_new_matmul_shape():
    import torch

    if not torch.cpu._is_avx512_bf16_supported():
        pytest.skip("bf16 matmuls go through oneDNN's cached kernels on CPUs with native bf16")
    growth: dict[str, float] = {}
    for _ in range(3):  # another look only while the last is not clear
        for setting in ("default", "32"):
            _keep_smaller(growth, setting, _rss_growth_mb(_ONEDNN_SCENARIO, setting))
        if growth["32"] < 0.85 * growth["default"]:
            break
    # measured: 200 shapes grew RSS 175 MB with oneDNN's 1,024 entries and 84 MB with 32 here (178 and 102
    # idle on 2026-11-28), 151 and 108 MB on CI; under load once 135 and 116 MB, and once 134 and 109 MB
    # after two looks (the allocator's share varies); a cap that is not applied gives about 1.0
    assert growth["32"] < 0.85 * growth["default"], growth


# Training's shape of work: a bf16 linear layer's forward and backward at 200 lengths, in a fresh interpreter
# that caps the caches as load_policy does (after importing torch) unless told "none"; prints the RSS growth
# in MB after the heap is trimmed.
_TRAINING_SHAPES_SCENARIO = textwrap.dedent("""
    import ctypes, sys
    from pathlib import Path
    import torch
    from agentgym_core.training.memory import limit_onednn_primitive_cache

    if sys.argv[1] != "none":
        limit_onednn_primitive_cache(int(sys.argv[1]))
    torch.set_num_threads(1)
    rss = lambda: int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20
    layer = torch.nn.Linear(576, 1536)
    start = rss()
    for n in range(300, 900, 3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(torch.randn(n, 576, requires_grad=True)).float().sum()
        out.backward()
    layer.zero_grad(set_to_none=True)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(rss() - start)
""")


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc and trims glibc's heap")
def test_pytorchs_own_primitive_cache_is_capped_too_or_training_shapes_keep_growing_rss():
    import torch

    if not torch.cpu._is_avx512_bf16_supported():
        pytest.skip("bf16 matmuls go through oneDNN's cached kernels on CPUs with native bf16")
    settings = {"oneDNN's cache only": ({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"}, "none"), "both": ({}, "32")}
    growth: dict[str, float] = {}
    for _ in range(3):  # another look only while the last is not clear
        for name, (env, argument) in settings.items():
            _keep_smaller(growth, name, _rss_growth_mb(_TRAINING_SHAPES_SCENARIO, argument, env))
        if growth["both"] < 0.5 * growth["oneDNN's cache only"]:
            break
    # measured on the Intel Xeon (AMX) on 2026-12-07: 200 MB with only oneDNN's cache capped, 43 MB with
    # both (521 MB with neither)
    assert growth["both"] < 0.5 * growth["oneDNN's cache only"], growth
