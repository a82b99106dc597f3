"""Rollout logs: one JSON line per trajectory in the run directory.

File: ``<run_dir>/trajectories.jsonl`` (training writes ``rollouts/step_<N>.jsonl``). Each line is
one object with these keys (the viewer reads this format; new keys may be added, none removed):

==================  ===========================================================================
key                 meaning
==================  ===========================================================================
``format``          ``"agentgym.trajectory/1"``
``step``            training step (-1 for evaluation)
``env``             environment name
``task_id``         task id; ``seed``, ``sample_index`` (which of K samples), ``category``
``messages``        the chat: ``[{role, content}]`` (system, user observations, assistant replies,
                    and the final observation)
``turns``           per turn: ``index, text`` (the reply), ``action`` (as parsed), ``observation``,
                    ``reward, success, invalid_action`` (the environment refused the action; null: it
                    did not say), ``finish_reason, sampled_tokens, gen_seconds, env_seconds``
``rewards``         per-turn rewards; ``outcome_reward`` their sum (the raw "score")
``success``         the environment's success flag at the end
``terminated``      ``truncated``, ``truncation_reason`` (max_turns | token_budget | env_step_limit | invalid_action),
                    ``failed``, ``failure_reason``
``num_turns``       turns taken; ``max_turns`` the budget it ran under
``mask``            ``{total, sampled, context}`` token counts
``timing``          ``{gen_seconds, env_seconds, wall_seconds}``
``tokens``          only with ``include_tokens``: ``{token_ids, loss_mask, logprobs}``
``tools``           only when the chat template rendered tool schemas (native tool calls): the schemas
``evaluation``      only in a trainer's evaluation log (``evaluations/step_<N>.jsonl``): what the
                    episode was played under (``panel_hash``, ``model``), so a resumed evaluation
                    keeps only episodes of its own panel
==================  ===========================================================================

:func:`trajectory_from_log_record` reads a record back as a :class:`Trajectory` without its tokens: enough
for every evaluation metric (success, score, turns, invalid actions).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from agentgym_core.rollout.trajectory import Span, Trajectory, Turn

__all__ = ["LOG_FORMAT", "RolloutLogWriter", "finished_records", "read_rollout_log", "trajectory_from_log_record",
           "trajectory_log_record"]

LOG_FORMAT = "agentgym.trajectory/1"


def trajectory_log_record(traj: Trajectory, *, step: int = -1, include_tokens: bool = False) -> dict[str, Any]:
    """The JSON object one trajectory is logged as (see the module docstring)."""
    record: dict[str, Any] = {
        "format": LOG_FORMAT,
        "step": step,
        "env": traj.env,
        "task_id": traj.task_id,
        "seed": traj.seed,
        "sample_index": traj.sample_index,
        "category": traj.category,
        "messages": traj.messages,
        "turns": [
            {
                "index": t.index, "text": t.text, "action": t.action, "observation": t.observation,
                "reward": t.reward, "success": t.success, "invalid_action": t.invalid_action,
                "finish_reason": t.finish_reason,
                "sampled_tokens": len(t.action_span), "gen_seconds": round(t.gen_seconds, 4),
                "env_seconds": round(t.env_seconds, 4),
            }
            for t in traj.turns
        ],
        "rewards": traj.turn_rewards,
        "outcome_reward": traj.outcome_reward,
        "success": traj.success,
        "terminated": traj.terminated,
        "truncated": traj.truncated,
        "truncation_reason": traj.truncation_reason,
        "failed": traj.failed,
        "failure_reason": traj.failure_reason,
        "num_turns": traj.num_turns,
        "max_turns": traj.max_turns,
        "mask": traj.mask_summary(),
        "timing": {
            "gen_seconds": round(traj.gen_seconds, 4), "env_seconds": round(traj.env_seconds, 4),
            "wall_seconds": round(traj.wall_seconds, 4),
        },
    }
    if traj.tools:  # re-tokenising the messages needs them (agentgym_core.finetune.data)
        record["tools"] = traj.tools
    if include_tokens:
        record["tokens"] = {"token_ids": traj.token_ids, "loss_mask": traj.loss_mask, "logprobs": traj.logprobs}
    return record


def trajectory_from_log_record(record: dict[str, Any]) -> Trajectory:
    """The trajectory ``record`` logs, without tokens (its turns' spans are empty): what the evaluation metrics read.
    A turn logged before turns said ``invalid_action`` reads as not judged (None)."""
    empty = Span(start=0, end=0)
    turns = [Turn(index=t.get("index", i), context_span=empty, action_span=empty, reward_index=0,
                  text=t.get("text") or "", action=t.get("action") or "", observation=t.get("observation"),
                  reward=float(t.get("reward") or 0.0), success=t.get("success"),
                  invalid_action=t.get("invalid_action"), finish_reason=t.get("finish_reason") or "eos",
                  gen_seconds=float(t.get("gen_seconds") or 0.0), env_seconds=float(t.get("env_seconds") or 0.0))
             for i, t in enumerate(record.get("turns") or ())]
    timing = record.get("timing") or {}
    return Trajectory(env=record.get("env") or "", task_id=record["task_id"], seed=record.get("seed"),
                      sample_index=record.get("sample_index", 0), category=record.get("category"),
                      messages=record.get("messages") or [], tools=record.get("tools"), turns=turns,
                      outcome_reward=float(record.get("outcome_reward", 0.0)), success=bool(record.get("success")),
                      terminated=bool(record.get("terminated")), truncated=bool(record.get("truncated")),
                      truncation_reason=record.get("truncation_reason"), failed=bool(record.get("failed")),
                      failure_reason=record.get("failure_reason"), max_turns=record.get("max_turns"),
                      gen_seconds=float(timing.get("gen_seconds") or 0.0),
                      env_seconds=float(timing.get("env_seconds") or 0.0),
                      wall_seconds=float(timing.get("wall_seconds") or 0.0))


class RolloutLogWriter:
    """Appends trajectories to a JSONL file as they finish (flushes each line, so a crash keeps them)."""

    def __init__(self, path: str | Path, *, step: int = -1, include_tokens: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.step, self.include_tokens = step, include_tokens
        self._file: TextIO = self.path.open("a", encoding="utf-8")

    def write(self, traj: Trajectory) -> None:
        record = trajectory_log_record(traj, step=self.step, include_tokens=self.include_tokens)
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def write_all(self, trajs: Iterable[Trajectory]) -> None:
        for traj in trajs:
            self.write(traj)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RolloutLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_rollout_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a rollout log, checking the format tag of each line."""
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("format") != LOG_FORMAT:
                raise ValueError(f"{path}:{number}: not an agentgym trajectory record (format {record.get('format')!r})")
            yield record


def finished_records(path: Path) -> list[dict[str, Any]]:
    """The records of a log an interrupted run was appending to. A last line cut short by the interrupt (no
    newline, not JSON) is dropped from the file, so appending goes on cleanly."""
    if not path.exists():
        return []
    data = path.read_bytes()
    good = data[: data.rfind(b"\n") + 1]  # complete lines only
    if len(good) != len(data):
        path.write_bytes(good)
    records = []
    for number, line in enumerate(good.decode("utf-8").splitlines(), 1):
        if line.strip():
            record = json.loads(line)
            if record.get("format") != LOG_FORMAT:
                raise ValueError(f"{path}:{number}: not an agentgym trajectory record; is this an eval run directory?")
            records.append(record)
    return records
