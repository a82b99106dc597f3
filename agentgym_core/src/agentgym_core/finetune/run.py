"""One entry point for every fine-tuning kind, and the warm start of an RL run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym_core.finetune.common import FinetuneResult
from agentgym_core.finetune.config import FinetuneConfig
from agentgym_core.plugins import PluginManager

__all__ = ["expert_solved_tasks", "run_finetune", "train_on_expert_solved", "warm_start_examples", "warm_start_sft"]


def run_finetune(config: FinetuneConfig, *, resume: bool = False, plugin_manager: PluginManager | None = None,
                 model: Any = None, tokenizer: Any = None) -> FinetuneResult:
    """Run ``config.kind`` (sft | dpo | rejection_sampling); ``result.model_path`` is the trained HF directory.

    As an RL warm start: run it, then set the RL config's ``model.path`` to ``str(result.model_path)``
    (the checkpoint layout is the RL trainer's, LoRA merged into ``model/``).
    """
    kwargs = {"resume": resume, "plugin_manager": plugin_manager, "model": model, "tokenizer": tokenizer}
    if config.kind == "sft":
        from agentgym_core.finetune.sft import run_sft

        return run_sft(config, **kwargs)
    if config.kind == "dpo":
        from agentgym_core.finetune.dpo import run_dpo

        return run_dpo(config, **kwargs)
    from agentgym_core.finetune.rejection import run_rejection_sampling

    return run_rejection_sampling(config, **kwargs)


def warm_start_sft(train_config: Any, *, plugin_manager: PluginManager | None = None,
                   model: Any = None, tokenizer: Any = None, resume: bool = False) -> FinetuneResult:
    """SFT before RL: fine-tune ``train_config.model`` on ``train_config.warm_start``, in place when ``model`` is given.

    ``train_config`` is an RL ``TrainConfig`` with a ``warm_start`` section
    (:class:`agentgym_core.finetune_options.WarmStartConfig`). Everything lives in
    ``<trainer.run_dir>/warm_start``: the expert demonstrations (``expert.jsonl``, collected first
    when ``warm_start.expert`` is set), the SFT metrics and its checkpoint. The held-out evaluation
    before and after SFT uses the RL run's envs, eval tasks and final horizon, so the three figures
    (base, SFT, SFT+RL) are comparable. A warm start that already finished (a resumed RL run) is
    not redone: its result is read back (``result.model_path`` is the fine-tuned model) and, when
    ``model`` is given, its weights loaded into ``model``, so ``model`` holds the fine-tuned weights
    either way. What SFT and its evaluations freed is given back before returning, for the RL that follows.
    ``resume``: the RL run is resumed, and reads its own evaluation after SFT back from its log.
    """
    import json

    from agentgym_core.finetune.sft import run_sft
    from agentgym_core.rl.plugin_options import final_horizon_of
    from agentgym_core.training.checkpoint import latest_checkpoint, load_policy_weights, load_trainer_state
    from agentgym_core.training.memory import release_memory

    warm = train_config.warm_start
    run_dir = Path(train_config.trainer.run_dir) / "warm_start"
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = _warm_start_paths(train_config)  # what warm_start_examples reads back for replay
    horizon = final_horizon_of(train_config, plugin_manager)  # the RL run's evaluations play it too
    config = FinetuneConfig.model_validate({
        "kind": "sft", "model": train_config.model, "envs": train_config.envs, "rollout": train_config.rollout,
        "data": {**warm.data.model_dump(), "paths": paths}, "sft": warm.sft, "optim": {"lr": warm.lr},
        "trainer": {"run_dir": str(run_dir), "seed": train_config.trainer.seed,
                    "eval_tasks": train_config.trainer.eval_tasks, "eval_samples": train_config.trainer.eval_samples,
                    "eval_max_turns": horizon,
                    "eval_before": train_config.trainer.eval_before and warm.eval_base,
                    "progress": train_config.trainer.progress,
                    "save_every": 10**9},
        "runtime": train_config.runtime})
    done = latest_checkpoint(run_dir)
    state = load_trainer_state(done) if done is not None else {}  # holds the optimizer: read it once
    if state.get("finished"):
        result = FinetuneResult(run_dir=run_dir, steps=int(state["step"]), checkpoint=done)
        metrics = run_dir / "metrics.jsonl"
        logged = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.exists() else []
        evals = [{k: v for k, v in e.items() if k != "kind"} for e in logged if e.get("kind") == "eval"]
        changed = _changed_eval_settings(run_dir / "config.yaml", config) if evals else []
        if changed:  # the RL evaluation would play under other settings: not comparable, so evaluated again
            if not resume:  # a resumed RL run reads its own evaluation after SFT back from its log
                print(f"warm start: its evaluations were made with other {', '.join(changed)} than this run's; "
                      "the model after SFT is evaluated again", flush=True)
            evals = []
        result.eval_before = next((e for e in evals if e.get("step") == 0), None)
        result.eval_after = next((e for e in evals if e.get("step") == result.steps), None)
        if model is not None:  # a resumed RL run built its model from the initial weights
            load_policy_weights(model, done)
            release_memory()
        return result
    if warm.expert is not None:
        _collect_expert_demos(train_config, run_dir / "expert.jsonl", plugin_manager, tokenizer)
    result = run_sft(config, plugin_manager=plugin_manager, model=model, tokenizer=tokenizer,
                     resume=done is not None, label="warm start sft")  # a warm start cut short continues
    if result.checkpoint is None:
        raise RuntimeError(f"warm start: SFT in {run_dir} wrote no checkpoint")
    release_memory()  # what SFT and its evaluation freed, before RL's learner and rollouts
    return result


_NOT_EVALUATION = {"url", "urls", "max_concurrency", "probe_interval_s", "weight", "train_split", "train_tasks"}
"""EnvConfig fields that do not change what a held-out evaluation scores (where the env runs, how many at once,
what RL trains on)."""


def _changed_eval_settings(saved: Path, config: FinetuneConfig) -> list[str]:
    """Which settings that decide a held-out evaluation's numbers differ between the warm start saved in
    ``saved`` (its config.yaml) and ``config`` (this run's): the envs, how replies are sampled, the token
    budget, the panel size and samples per task, the horizon and the seed. Empty when they agree or nothing was
    saved."""
    from agentgym_core.finetune.config import load_finetune_config

    if not saved.exists():
        return []
    before = load_finetune_config(saved)

    def settings(c: FinetuneConfig) -> dict[str, Any]:
        r, t = c.rollout, c.trainer
        return {"envs": [e.model_dump(mode="json", exclude=_NOT_EVALUATION) for e in c.envs],
                "rollout sampling": r.eval_sampling(seed=0),  # the seed is its own entry
                "token budget": r.max_total_tokens, "panel size": t.eval_tasks, "samples per task": t.eval_samples,
                "horizon": t.eval_max_turns, "seed": t.seed}

    old, new = settings(before), settings(config)
    return [name for name in new if old[name] != new[name]]


def warm_start_examples(train_config: Any, model: Any, tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """The examples the finished warm start trained on, as ``(token_ids, loss_mask)`` pairs (``warm_start.replay``).

    The same files and filters as :func:`warm_start_sft` (``warm_start.data`` and the run's ``expert.jsonl``).
    Without ``tokenizer`` only records that hold token ids can be read (others raise ``DataFormatError``).
    """
    from agentgym_core.finetune.common import select_examples
    from agentgym_core.finetune.data import TokenizerChat, load_examples
    from agentgym_core.rollout.chat import ChatFormat

    chat = ChatFormat(TokenizerChat.for_model(model, tokenizer)) if tokenizer is not None else None
    examples = select_examples(load_examples(_warm_start_paths(train_config), chat), train_config.warm_start.data)
    return [(e.token_ids, e.loss_mask) for e in examples]


def _warm_start_paths(train_config: Any) -> list[str]:
    warm = train_config.warm_start
    expert = [str(Path(train_config.trainer.run_dir) / "warm_start" / "expert.jsonl")] if warm.expert is not None else []
    return [*warm.data.paths, *expert]


def expert_solved_tasks(path: str | Path, env: str, horizon: int) -> list[int]:
    """The task ids of ``env`` whose expert episodes in ``path`` (a rollout log) succeeded within ``horizon``
    turns, in the order played, each once."""
    from agentgym_core.rollout.logs import read_rollout_log

    solved: dict[int, None] = {}
    for record in read_rollout_log(path):
        if record.get("env") == env and record.get("success") and len(record.get("turns") or []) <= horizon:
            solved[int(record["task_id"])] = None
    return list(solved)


def train_on_expert_solved(train_config: Any, horizon: int) -> Any:
    """``train_config`` with the expert's env training only on the tasks its expert solved within ``horizon``
    (``warm_start.expert.rl_tasks: solved``; any other setting: ``train_config`` itself).

    Reads ``<run_dir>/warm_start/expert.jsonl``, so it comes after :func:`warm_start_sft`. Raises
    ``ValueError`` when the expert solved none of its tasks in time: RL would have nothing to draw.
    """
    demos = train_config.warm_start.expert if train_config.warm_start is not None else None
    if demos is None or demos.rl_tasks != "solved":
        return train_config
    name = _expert_env_name(train_config)
    path = Path(train_config.trainer.run_dir) / "warm_start" / "expert.jsonl"
    solved = expert_solved_tasks(path, name, horizon)
    if not solved:
        raise ValueError(f"warm_start.expert.rl_tasks=solved: the expert solved none of its {demos.n} {name} tasks "
                         f"within RL's {horizon}-turn horizon ({path}); raise warm_start.expert.n, or set "
                         "rl_tasks: all")
    if train_config.trainer.progress:
        print(f"RL trains on the {len(solved)} of the expert's {demos.n} {name} tasks it solved within {horizon} turns",
              flush=True)
    envs = [e.model_copy(update={"train_tasks": solved}) if e.name == name else e for e in train_config.envs]
    return train_config.model_copy(update={"envs": envs})


def _expert_env_name(train_config: Any) -> str:
    """The environment ``warm_start.expert`` plays: its ``env``, else the recipe's first."""
    return train_config.warm_start.expert.env or train_config.envs[0].name


def _collect_expert_demos(train_config: Any, out: Path, plugin_manager: PluginManager | None, tokenizer: Any) -> Path:
    """``warm_start.expert``: the env's expert on a seeded shuffle of training tasks, written to ``out`` once."""
    from agentgym_core.finetune.collect import collect
    from agentgym_core.finetune.config import CollectConfig

    if out.exists():  # written under a temporary name and renamed: an existing file is complete
        return out
    demos = train_config.warm_start.expert
    env = next((e for e in train_config.envs if e.name == _expert_env_name(train_config)), None)
    if env is None:
        raise ValueError(f"warm_start.expert.env={demos.env!r} is not one of the recipe's envs")
    partial = out.with_suffix(".partial.jsonl")
    partial.unlink(missing_ok=True)
    collect(CollectConfig(env=env.name, policy="expert", split=env.train_split, categories=env.categories,
                          n=demos.n, shuffle=True,
                          seed=train_config.trainer.seed, max_turns=demos.max_turns, workers=demos.workers,
                          env_url=(env.server_urls or [None])[0],  # the expert plays one episode at a time
                          env_kwargs=env.env_kwargs, out=str(partial)),
            plugin_manager=plugin_manager, tokenizer=tokenizer, progress=train_config.trainer.progress)
    partial.rename(out)
    return out
