"""The suite's `--dist loadgroup` (pyproject.toml) keeps each xdist group on one worker.

tests/conftest.py puts every test file in a group of its own, so its module fixtures are built once;
the Ray tests share one private cluster and the install tests one source tree, one file after
another. pytest 9.2 changed how node ids are stored, and pytest-xdist 3.8's loadgroup (which appends
``@group`` to them) then silently spreads a group's tests over all workers
(pytest-dev/pytest-xdist#1386): the dev extra caps pytest below 9.2, and this test fails if some
pytest and xdist pair breaks the grouping again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

GROUPED = textwrap.dedent("""\
    import os
    from pathlib import Path

    import pytest

    pytestmark = pytest.mark.xdist_group("shared")

    @pytest.mark.parametrize("i", range(3))
    def test_records_its_worker(i):
        Path(f"{NAME}-{i}.worker").write_text(os.environ["PYTEST_XDIST_WORKER"])
""")


def test_a_group_split_over_two_files_runs_on_one_worker(tmp_path: Path):
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(GROUPED.replace("{NAME}", name))
    (tmp_path / "test_other.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not this repository's options or conftest
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    result = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                             "-q", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    workers = {path.name: path.read_text() for path in tmp_path.glob("*.worker")}
    assert len(workers) == 6, workers
    assert len(set(workers.values())) == 1, f"the group ran on several workers: {workers}"
