"""A checkpoint the disk cannot hold fails with a message that says so and how to continue.

torch.save reports a full disk as ``RuntimeError: basic_ios::clear: iostream error`` (seen in a main job on
this machine, 2026-11-29). Here the operating system refuses the write for real: the child process's
largest file is capped (``RLIMIT_FSIZE``), so writing the model's weights fails as a full disk fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

resource = pytest.importorskip("resource")  # POSIX only

CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    from agentgym_core.testing.tiny_model import tiny_chat_model
    from agentgym_core.training.checkpoint import CheckpointWriteError, latest_checkpoint, save_checkpoint

    run_dir = Path(sys.argv[1])
    model, tokenizer = tiny_chat_model()
    save_checkpoint(run_dir, 1, model=model, tokenizer=tokenizer, trainer_state={"step": 1})
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
    try:
        save_checkpoint(run_dir, 2, model=model, tokenizer=tokenizer, trainer_state={"step": 2})
        outcome = {"raised": None}
    except CheckpointWriteError as exc:
        outcome = {"raised": str(exc)}
    outcome["latest"] = latest_checkpoint(run_dir).name
    outcome["left"] = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    print(json.dumps(outcome))
""")


def test_a_checkpoint_the_disk_refuses_names_the_space_left_and_the_intact_checkpoint_to_resume_from(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", CHILD, str(run_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    message = outcome["raised"]
    assert message is not None, "writing past the file-size cap did not fail"
    assert "could not write checkpoint 2" in message
    assert "GB free now" in message
    assert "step_000001, is intact" in message
    assert f"agentgym train --resume {run_dir}" in message
    assert outcome["latest"] == "step_000001"
    assert outcome["left"] == ["latest", "step_000001"]  # the half-written step 2 is gone
