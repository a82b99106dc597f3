"""Evaluation: roll a model out on a split and report success and score, per category.

The episodes are played by the evaluator the trainer uses too (:func:`agentgym_core.evaluation.held_out.play`)
and reported in its results shape (:mod:`agentgym_core.evaluation.results`: the definitions of success,
score, Avg@K and Pass@K are there).

Resuming: each trajectory is appended to ``trajectories.jsonl`` (and flushed) as it finishes, and
the run's settings go to ``eval_config.json`` first. An interrupted run (Ctrl-C) keeps what
finished; ``resume=True`` (``agentgym eval ... --out DIR --resume``) plays only the (task, sample)
pairs the log does not hold yet, after checking that the settings that change results are the
same, and ``results.json`` then covers every trajectory of the log. Without ``resume``, a run
directory that already holds trajectories is refused rather than mixed into.

Backends that only speak text (``--backend openai``: API models) are rolled out by
:class:`agentgym_core.rollout.text_engine.TextRolloutEngine`; their trajectories carry no tokens
and are logged with ``trainable: false``. Token backends use the token engine.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentgym_core.env import Env
from agentgym_core.evaluation.held_out import play
from agentgym_core.evaluation.panel import (
    describe_panel,
    evaluation_conditions,
    held_out_order,
    panel_hash,
    panel_record,
    panel_tasks,
)
from agentgym_core.evaluation.results import EvalResults, GroupMetrics, build_results, summarize
from agentgym_core.http.opening import env_factory
from agentgym_core.rollout.backend import RolloutBackend, SamplingParams, closing_backend
from agentgym_core.rollout.engine import EngineConfig, EnvSource, EpisodeSpec
from agentgym_core.rollout.logs import RolloutLogWriter, finished_records, trajectory_from_log_record
from agentgym_core.rollout.text_engine import ChatBackend, TextRolloutLogWriter, is_chat_backend
from agentgym_core.rollout.tool_calls import tool_call_env
from agentgym_core.rollout.trajectory import Trajectory

__all__ = ["EvalConfig", "EvalInterrupted", "EvalResults", "GroupMetrics", "evaluate", "summarize"]

# Settings that change what an evaluation measures: a resumed run must have the same.
_RUN_DEFINING = ("env", "model", "backend", "backend_options", "base_url", "split", "categories", "limit", "env_options", "action_format", "n_samples", "temperature",
                 "top_p", "max_new_tokens", "max_rounds", "max_total_tokens", "seed")


class EvalConfig(BaseModel):
    """What `agentgym eval` runs."""

    model_config = ConfigDict(extra="forbid")

    env: str = Field(description="Environment name (see `agentgym envs`).")
    model: str = Field(default="smollm2-135m-instruct", description="Named model, .gguf file or HF directory.")
    backend: str = Field(
        default="transformers",
        description="Rollout backend name (see `agentgym plugins`); 'openai' evaluates a model behind an "
        "OpenAI-compatible API.",
    )
    backend_options: dict[str, Any] = Field(
        default_factory=dict, description="Further options of the backend, as a recipe's rollout.backend_options "
        "(`--from` takes the run's).",
    )
    base_url: str | None = Field(
        default=None, description="API root of an OpenAI-compatible server (backend 'openai'), e.g. "
        "http://127.0.0.1:8001/v1.",
    )
    api_key: str | None = Field(
        default=None, description="API key for backend 'openai' (default: $OPENAI_API_KEY); never saved.",
    )
    request_timeout_s: float | None = Field(
        default=None, gt=0, description="Limit on one API request (backend 'openai'; default: the backend's).",
    )
    split: str = Field(default="test", description="Task split to evaluate on.")
    categories: list[str] | None = Field(
        default=None, description="Only tasks of these catalog categories (BabyAI levels, TextCraft depths, ...).")
    limit: int | None = Field(
        default=None, ge=1, description="Evaluate N tasks of the split, taken round-robin across its categories."
    )
    env_options: dict[str, Any] = Field(
        default_factory=dict, description="Constructor options of the environment (in-process only)."
    )
    action_format: Literal["text", "tool_call"] = Field(
        default="text", description="How replies carry actions: an `Action:` line, or a call of the `act` tool "
        "(agentgym_core.rollout.tool_calls), as a recipe's envs entry says (`--from` takes the run's).",
    )
    n_samples: int = Field(default=1, ge=1, description="K: samples per task (Avg@K, Pass@K).")
    temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    constrain_actions: bool = Field(
        default=False, description="Sample each reply's action from the environment's available actions alone, as a "
        "recipe's rollout.constrain_actions (`--from` takes the run's).")
    max_new_tokens: int = Field(default=256, ge=1, description="Per-turn cap on generated tokens.")
    max_rounds: int = Field(default=20, ge=1, description="Turn budget per trajectory.")
    max_total_tokens: int = Field(default=8192, ge=64, description="Token budget per trajectory.")
    num_envs: int = Field(default=16, ge=1, description="Environment instances (trajectories in flight).")
    env_url: str | None = Field(default=None, description="Evaluate against a running env server instead.")
    step_timeout_s: float = Field(default=120.0, gt=0, description="Limit on one env call.")
    seed: int = Field(default=0, description="Sampling seed.")
    device: str = Field(default="auto", description="'auto', 'cpu' or 'cuda'.")
    threads: int | None = Field(default=None, ge=1, description="torch CPU threads.")
    out_dir: str | None = Field(default=None, description="Run directory (default runs/eval-<env>-<time>).")
    include_tokens: bool = Field(
        default=False, description="Also log each trajectory's token ids, loss mask and log-probs in "
        "trajectories.jsonl (the viewer's token view; about 3x larger logs). Local backends only.",
    )
    resume: bool = Field(
        default=False, description="Finish an interrupted evaluation in out_dir: play only the (task, sample) "
        "pairs its trajectories.jsonl does not hold yet.",
    )


class EvalInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`evaluate`: says where the finished trajectories are, for the resume hint."""

    def __init__(self, run_dir: Path, kept: int, total: int) -> None:
        super().__init__(f"{kept} of {total} trajectories kept in {run_dir / 'trajectories.jsonl'}")
        self.run_dir, self.kept, self.total = run_dir, kept, total


def backend_options(config: EvalConfig) -> dict[str, Any]:
    """The options given to the backend factory: the model, plus only the settings the user set.

    Each backend validates its own options, so a setting it does not take (``--device`` for an
    API model, ``--base-url`` for a local one) is reported instead of ignored.
    """
    options: dict[str, Any] = {**config.backend_options, "model": config.model}
    if config.device != "auto":
        options["device"] = config.device
    if config.threads is not None:
        options["threads"] = config.threads
    if config.base_url is not None:
        options["base_url"] = config.base_url
    if config.api_key is not None:
        options["api_key"] = config.api_key
    if config.request_timeout_s is not None:
        options["timeout_s"] = config.request_timeout_s
    return options


def _make_backend(config: EvalConfig) -> RolloutBackend | ChatBackend:
    from agentgym_core.plugins import get_plugin_manager

    factory = get_plugin_manager().get("rollout_backend", config.backend)
    return factory(backend_options(config))


def _check_resume(config: EvalConfig, run_dir: Path, records: list[dict[str, Any]]) -> None:
    """Refuse to mix two evaluations in one directory; a resume must repeat the run's settings."""
    if not config.resume:
        if records:
            raise ValueError(f"{run_dir} already holds {len(records)} trajectories of an earlier evaluation; add "
                             "--resume to finish that one, or choose another --out")
        return
    if config.out_dir is None:
        raise ValueError("--resume finishes an interrupted evaluation: name its run directory with --out RUN_DIR")
    saved_path = run_dir / "eval_config.json"
    if not saved_path.exists():
        raise ValueError(f"--resume: {saved_path} not found; is {run_dir} the run directory of an `agentgym eval`?")
    saved = json.loads(saved_path.read_text(encoding="utf-8"))
    # A setting added since the run was saved took its default there.
    saved = {key: saved.get(key, EvalConfig.model_fields[key].get_default(call_default_factory=True))
             for key in _RUN_DEFINING}
    now = config.model_dump()
    changed = [f"{key} {saved[key]!r} -> {now[key]!r}" for key in _RUN_DEFINING if saved[key] != now[key]]
    if changed:
        raise ValueError(f"--resume: the settings differ from the interrupted run's ({'; '.join(changed)}); "
                         "repeat them, or evaluate into another --out")


def evaluate(
    config: EvalConfig,
    *,
    backend: RolloutBackend | ChatBackend | None = None,
    make_env: Callable[[], Env] | None = None,
    progress: bool = True,
) -> EvalResults:
    """Run the evaluation, write ``results.json`` + ``trajectories.jsonl`` to the run dir, return results.
    A backend it makes itself (``backend`` None) is closed at the end; a caller's is left to the caller."""
    with contextlib.ExitStack() as owned:
        return _evaluate(config, backend, make_env, progress, owned)


def _evaluate(config: EvalConfig, backend: RolloutBackend | ChatBackend | None, make_env: Callable[[], Env] | None,
              progress: bool, owned: contextlib.ExitStack) -> EvalResults:
    if make_env is None:
        opened = env_factory(config.env, url=config.env_url, env_kwargs=config.env_options,
                             timeout_s=config.step_timeout_s, where="--env-kwargs",
                             played_as=tool_call_env if config.action_format == "tool_call" else None)
        factory, catalog = opened.make, opened.tasks()
    else:
        factory = make_env
        probe = make_env()
        try:
            catalog = probe.tasks()
        finally:
            probe.close()
    # The split round-robin across categories (as the trainer orders its held-out tasks), then the panel of it.
    task_ids = panel_tasks(held_out_order(catalog, config.split, config.categories), config.limit)
    categories = catalog.category_index()
    episodes = [
        EpisodeSpec(task_id=t, sample_index=s, category=categories.get(t), seed=None, env=config.env)
        for t in task_ids for s in range(config.n_samples)
    ]
    run_dir = Path(config.out_dir or f"runs/eval-{config.env}-{datetime.now():%Y%m%d-%H%M%S}")
    log_path = run_dir / "trajectories.jsonl"
    kept = finished_records(log_path)
    _check_resume(config, run_dir, kept)  # before the model loads: a wrong directory fails at once
    finished = {(r["task_id"], r.get("sample_index", 0)) for r in kept}
    order = {(spec.task_id, spec.sample_index): i for i, spec in enumerate(episodes)}
    kept = [r for r in kept if (r["task_id"], r.get("sample_index", 0)) in order]
    episodes = [spec for spec in episodes if (spec.task_id, spec.sample_index) not in finished]
    backend = backend or owned.enter_context(closing_backend(_make_backend(config)))
    text_only = is_chat_backend(backend)
    if text_only and config.include_tokens:
        raise ValueError(f"include_tokens needs a local backend: {config.backend!r} returns text only, so there "
                         "are no token ids to log; drop --include-tokens or use --backend transformers")
    if text_only and config.constrain_actions:
        raise ValueError(f"constrain_actions needs a local backend: {config.backend!r} returns text, so no token of a "
                         "reply can be masked; drop --constrain-actions or use --backend transformers")
    if text_only and hasattr(backend, "preflight"):
        backend.preflight()  # a wrong model name or key fails here, before any episode
    run_dir.mkdir(parents=True, exist_ok=True)
    sampling = SamplingParams(temperature=config.temperature, top_p=config.top_p,
                              max_new_tokens=config.max_new_tokens, seed=config.seed,
                              constrain_actions=config.constrain_actions)
    conditions = evaluation_conditions(sampling, horizon=config.max_rounds, max_total_tokens=config.max_total_tokens,
                                       samples_per_task=config.n_samples)
    panel = {config.env: list(task_ids)}  # logged before any episode: which tasks this run evaluates, and how
    (run_dir / "evaluation_panel.json").write_text(json.dumps(panel_record(panel, conditions)) + "\n",
                                                   encoding="utf-8")
    if progress:
        print(describe_panel(panel, conditions), file=sys.stderr)
    if not kept:
        (run_dir / "eval_config.json").write_text(
            json.dumps(config.model_dump(exclude={"api_key"}), indent=2) + "\n", encoding="utf-8")
    rollout = EngineConfig(
        sampling=sampling, max_turns=config.max_rounds, max_total_tokens=config.max_total_tokens,
        step_timeout_s=config.step_timeout_s, env_workers=min(config.num_envs, 32),
    )
    desc = f"eval {config.env}" + (f" (resumed: {len(kept)} kept)" if kept else "")
    done: list[Trajectory] = []
    start = time.perf_counter()
    with (TextRolloutLogWriter(log_path) if text_only
          else RolloutLogWriter(log_path, include_tokens=config.include_tokens)) as log:
        def on_done(traj: Trajectory) -> None:
            done.append(traj)
            log.write(traj)  # flushed: an interrupted run keeps every trajectory that finished

        try:
            trajs, stats = play(backend, {config.env: EnvSource(factory, config.num_envs)}, episodes, rollout,
                                desc=desc, progress=progress, on_done=on_done)
        except KeyboardInterrupt:
            raise EvalInterrupted(run_dir, len(kept) + len(done), len(kept) + len(episodes)) from None
    # Every trajectory of the run directory, in the order of the split: earlier runs' and this one's.
    # Those read back keep their turns' verdicts, so the invalid-action rate covers every trajectory.
    every = sorted([trajectory_from_log_record(r) for r in kept] + list(trajs),
                   key=lambda t: order[(t.task_id, t.sample_index)])
    wall = time.perf_counter() - start
    results = build_results(
        every, config=config.model_dump(exclude={"api_key"}), panel_hash=panel_hash(panel, conditions), trainable=not text_only,
        timing={"wall_seconds": wall, "gen_seconds": stats.gen_seconds, "sampled_tokens": float(stats.sampled_tokens),
                "trajectories_per_min": 60 * len(trajs) / wall if wall else 0.0},
        run_dir=str(run_dir),
        sampling_setup={str(k): str(v) for k, v in (getattr(backend, "sampling_setup", None) or {}).items()})
    (run_dir / "results.json").write_text(json.dumps(results.model_dump(), indent=2) + "\n", encoding="utf-8")
    return results
