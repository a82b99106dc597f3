"""`agentgym eval`'s progress line moves every turn, and an interrupted evaluation keeps what finished
and resumes where it stopped (a real process, interrupted with SIGINT as Ctrl-C does)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
from guess_env import GuessEnv

from agentgym_core.evaluation import EvalConfig, evaluate
from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams, Trajectory
from agentgym_core.rollout.progress import RolloutProgress


def frames(stderr: str) -> list[str]:
    """What the terminal showed, one redraw of the progress line each."""
    return [f.strip() for f in re.split(r"[\r\n]", stderr) if f.strip()]


def test_eval_progress_shows_turns_tokens_per_second_and_time_left_before_any_trajectory_ends(
    tiny_backend, tmp_path, capsys
):
    config = EvalConfig(
        env="guess",
        split="test",
        limit=1,
        max_new_tokens=8,
        max_rounds=3,
        num_envs=1,
        out_dir=str(tmp_path / "run"),
    )
    evaluate(config, backend=tiny_backend, make_env=lambda: GuessEnv(step_delay=0.3))
    shown = frames(capsys.readouterr().err)
    before_end = [f for f in shown if "0/1 traj" in f]
    assert any(re.search(r"\b\d+ turns?, \d+\.\d tok/s, at most \d+:\d\d left", f) for f in before_end), shown
    assert "1/1 traj" in shown[-1] and "3 turns" in shown[-1] and "success 0/1" in shown[-1], shown


def test_time_left_is_a_bound_until_a_trajectory_ends_then_uses_the_turns_they_took():
    line = RolloutProgress(4, desc="eval", max_turns=10, enabled=False)
    first = Trajectory(env="guess", task_id=1)
    line.turn(first)
    time.sleep(0.01)
    left, bound = line.seconds_left()
    assert bound and left is not None  # nothing finished: every trajectory may still use its 10 turns
    line.done(first)  # it took 1 turn (none recorded on it: counted once, not twice)
    assert (line.finished, line.turns) == (1, 1)
    left_after, bound = line.seconds_left()
    assert not bound and left_after < left  # 3 more trajectories of ~1 turn, not 4 of 10
    assert "1 turn, " in line.status() and "~" in line.status()


def test_rollout_engine_reports_every_turn(tiny_backend):
    seen: list[int] = []
    config = EngineConfig(sampling=SamplingParams(max_new_tokens=4, seed=0), max_turns=3)
    with RolloutEngine(tiny_backend, GuessEnv, num_envs=2, config=config) as engine:
        trajs = engine.run(
            [EpisodeSpec(task_id=1), EpisodeSpec(task_id=2)], on_turn=lambda t: seen.append(t.task_id)
        )
    assert len(seen) == sum(t.num_turns for t in trajs) == 6


@pytest.mark.slow
def test_ctrl_c_keeps_finished_trajectories_and_the_printed_command_resumes(tmp_path):
    pytest.importorskip("agentgym_env_guess")
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "eval"
    log = out / "trajectories.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGYM_")}
    cli = [sys.executable, "-m", "agentgym_core.cli"]
    args = [
        "eval",
        "--env",
        "guess",
        "--model",
        str(tmp_path / "model"),
        "--limit",
        "40",
        "--num-envs",
        "1",
        "--max-rounds",
        "3",
        "--max-new-tokens",
        "24",
        "--threads",
        "1",
        "--out",
        str(out),
    ]
    # SIGINT at its default in the child, as in a terminal: a suite started in the background of a
    # script inherits SIGINT ignored, and Python then never turns it into KeyboardInterrupt.
    proc = subprocess.Popen([*cli, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and log.read_text().count("\n") >= 2) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    kept = [json.loads(line) for line in log.read_text().splitlines()]
    assert 2 <= len(kept) < 40
    message = stderr.strip().splitlines()[-1]
    assert message.startswith(
        f"interrupted: {len(kept)} of 40 trajectories finished and are kept in {log}"
    ), stderr
    command = shlex.split(message.split("; to finish the rest, run: ")[1])
    assert command[0] == "agentgym" and command[-3:] == ["--out", str(out), "--resume"]

    again = subprocess.run([*cli, *args], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "add --resume to finish that one" in again.stderr  # never mixed silently

    resumed = subprocess.run([*cli, *command[1:]], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode in (0, 1), resumed.stderr  # 1: every trajectory failed (a random model may)
    assert f"(resumed: {len(kept)} kept)" in resumed.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[: len(kept)] == kept  # what finished before the interrupt is untouched
    assert len({(r["task_id"], r["sample_index"]) for r in records}) == len(records) == 40
    results = json.loads((out / "results.json").read_text())
    assert results["overall"]["samples"] == 40 and len(results["per_task"]) == 40


def test_a_run_directory_is_never_mixed_into_and_a_resume_must_repeat_the_settings(tiny_backend, tmp_path):
    out = str(tmp_path / "run")
    config = EvalConfig(
        env="guess", split="test", limit=2, max_new_tokens=4, max_rounds=2, num_envs=2, out_dir=out
    )
    first = evaluate(config, backend=tiny_backend, make_env=GuessEnv, progress=False)
    with pytest.raises(
        ValueError, match="already holds 2 trajectories of an earlier evaluation; add --resume"
    ):
        evaluate(config, backend=tiny_backend, make_env=GuessEnv, progress=False)
    changed = config.model_copy(update={"resume": True, "temperature": 0.7, "limit": 3})
    with pytest.raises(ValueError, match=r"settings differ .*limit 2 -> 3; temperature 0\.0 -> 0\.7"):
        evaluate(changed, backend=tiny_backend, make_env=GuessEnv, progress=False)
    with pytest.raises(ValueError, match="name its run directory with --out RUN_DIR"):
        evaluate(
            config.model_copy(update={"resume": True, "out_dir": None}),
            backend=tiny_backend,
            make_env=GuessEnv,
            progress=False,
        )
    # Resuming a finished run plays nothing and reports the same results, now faster settings aside.
    again = evaluate(
        config.model_copy(update={"resume": True, "num_envs": 1}),
        backend=tiny_backend,
        make_env=GuessEnv,
        progress=False,
    )
    assert again.per_task == first.per_task and again.overall == first.overall
    assert len((tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()) == 2
    # A run saved before a setting existed (action_format) resumes: there it took the default.
    saved = tmp_path / "run" / "eval_config.json"
    saved.write_text(json.dumps({k: v for k, v in json.loads(saved.read_text()).items() if k != "action_format"}))
    resume = config.model_copy(update={"resume": True})
    assert evaluate(resume, backend=tiny_backend, make_env=GuessEnv, progress=False).per_task == first.per_task
    with pytest.raises(ValueError, match="action_format 'text' -> 'tool_call'"):
        evaluate(resume.model_copy(update={"action_format": "tool_call"}), backend=tiny_backend,
                 make_env=GuessEnv, progress=False)


class RefusingGuessEnv(GuessEnv):
    """GuessEnv that says which actions it refused: those without a number."""

    def step(self, action: str):
        result = super().step(action)
        return result.model_copy(update={"invalid_action": re.search(r"-?\d+", action) is None})


def test_a_resumed_evaluation_reports_what_an_uninterrupted_one_does(tiny_backend, tmp_path):
    whole = tmp_path / "whole"
    config = EvalConfig(env="guess", split="test", limit=6, max_new_tokens=6, max_rounds=3, num_envs=2,
                        out_dir=str(whole))
    first = evaluate(config, backend=tiny_backend, make_env=RefusingGuessEnv, progress=False)
    assert first.overall.invalid_action_rate, "the tiny model's replies should be refused now and then"
    # An evaluation cut short after three trajectories: its log and settings, as the interrupt leaves them.
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "trajectories.jsonl").write_text("".join((whole / "trajectories.jsonl").read_text().splitlines(True)[:3]))
    (cut / "eval_config.json").write_text((whole / "eval_config.json").read_text())
    resumed = evaluate(config.model_copy(update={"out_dir": str(cut), "resume": True}), backend=tiny_backend,
                       make_env=RefusingGuessEnv, progress=False)
    # the three read back count with their turns and refused actions, not as episodes without any
    assert resumed.per_task == first.per_task
    assert resumed.overall == first.overall and resumed.categories == first.categories


def test_a_line_cut_short_by_the_interrupt_is_dropped_before_resuming(tiny_backend, tmp_path):
    out = tmp_path / "run"
    config = EvalConfig(
        env="guess", split="test", limit=3, max_new_tokens=4, max_rounds=2, num_envs=1, out_dir=str(out)
    )
    evaluate(config, backend=tiny_backend, make_env=GuessEnv, progress=False)
    log = out / "trajectories.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # the second was being written at Ctrl-C
    resumed = evaluate(
        config.model_copy(update={"resume": True}), backend=tiny_backend, make_env=GuessEnv, progress=False
    )
    assert resumed.overall.samples == 3
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["task_id"] for r in records) == sorted(r["task_id"] for r in resumed.per_task)
