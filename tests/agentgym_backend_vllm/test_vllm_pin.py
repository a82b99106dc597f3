"""The pinned vLLM range is stated once in pyproject.toml; the fake, the docs' GPU page and the plugin's README agree."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "agentgym_backend_vllm"


def pinned() -> Requirement:
    (line,) = re.findall(r'^engine = \["([^"]+)"\]$', (PLUGIN / "pyproject.toml").read_text(), re.M)
    requirement = Requirement(line)
    assert requirement.name == "vllm"
    return requirement


def test_the_fake_mirrors_a_release_inside_the_pinned_range():
    import fake_vllm

    mirrored = Version(fake_vllm.__version__).base_version  # "0.32.0+agentgym.fake" -> "0.32.0"
    assert pinned().specifier.contains(mirrored), f"fake_vllm mirrors {mirrored}, outside {pinned()}"
    for clause in str(pinned().specifier).split(","):  # the fake's header line names the range too
        assert clause in fake_vllm.MIRRORS, f"fake_vllm.MIRRORS = {fake_vllm.MIRRORS!r} lacks {clause}"


def test_the_docs_and_the_plugin_readme_state_the_pinned_range():
    spec = ",".join(sorted(str(pinned().specifier).split(","), reverse=True))  # ">=0.16,<0.34"
    for readme in (ROOT / "docs" / "how-to" / "gpu-and-vllm.md", PLUGIN / "README.md"):
        assert f"vllm{spec}" in readme.read_text(), f"{readme} does not state vllm{spec}"
