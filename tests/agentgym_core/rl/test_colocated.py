"""Rollouts and scoring shared by the learner ranks of the local launcher (gloo ranks, strict collectives)."""

from __future__ import annotations

import json

import pytest
import torch
from learner_ranks import RANKS_LR, counted_run, train_lines

from agentgym_core.rl.distributed import spawn
from agentgym_core.rl.forward import count_forwards, forward_tokens
from agentgym_core.rl.learner import balanced_shares

EPISODES_PER_STEP = 6  # learner_ranks.BASE: 2 tasks x group_size 3


@pytest.mark.slow
def test_two_ranks_each_sample_half_of_every_step_and_score_half_of_its_rows(tmp_path):
    run_dir, counts_dir = tmp_path / "run", tmp_path / "counts"
    counts_dir.mkdir()
    # Both ranks evaluate before training, after step 1 and after the last, each its share of 3 tasks (on the
    # rollout group: strict collectives check it); rank 0 logs the whole panel.
    overrides = [*RANKS_LR, "trainer.learners=2", "trainer.eval_every=1", "trainer.eval_tasks=3"]
    spawn(counted_run, 2, str(run_dir), str(counts_dir), overrides)
    counts = [json.loads((counts_dir / f"rank{r}.json").read_text()) for r in (0, 1)]
    lines = train_lines(run_dir)
    steps = len(lines)
    assert steps == 2
    assert [c["episodes"] for c in counts] == [EPISODES_PER_STEP // 2 * steps] * 2
    for line in lines:  # the step's metrics name what each rank sampled; every rank trained on all of it
        assert line["rollout_episodes/worker0"] == line["rollout_episodes/worker1"] == EPISODES_PER_STEP // 2
        assert line["trajectories"] == EPISODES_PER_STEP
        # the sampler/learner mismatch of each rank's own engine, so one whose sync failed is not averaged away
        assert {"sampler_kl/worker0", "sampler_kl/worker1"} <= set(line)
        assert line["sampler_kl_worst"] >= max(line["sampler_kl/worker0"], line["sampler_kl/worker1"])
    evaluations = [x for x in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
                   if x["kind"] == "eval"]
    assert [(x["step"], x["tasks"], len(x["per_task"])) for x in evaluations] == [(0, 3, 3), (1, 3, 3), (2, 3, 3)]
    trained = sum(line["trained_trajectories"] for line in lines)
    scored = [c["scored_rows"] for c in counts]
    assert sum(scored) == sum(int(line["trajectories"] - line["infra_failed"]) for line in lines)
    # Each rank scores a share of every step.
    assert min(scored) >= steps and max(scored) < sum(scored), scored
    assert trained > 0


def test_balanced_shares_split_rows_by_tokens_in_batch_order():
    lengths = [90, 10, 50, 50, 10, 90]
    shares = balanced_shares(lengths, 2)
    assert sorted(i for s in shares for i in s) == list(range(6))
    assert [sum(lengths[i] for i in s) for s in shares] == [150, 150]
    assert all(s == sorted(s) for s in shares)
    assert balanced_shares([5], 3) == [[0], [], []]  # fewer rows than ranks: the others score none


def test_count_forwards_counts_what_forward_tokens_runs():
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, _ = tiny_chat_model(seed=0)
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    sequences = [list(range(3, 3 + n)) for n in (40, 7, 25, 12, 33)]
    mask = torch.zeros(5, 40)
    for i, s in enumerate(sequences):
        mask[i, 2 : len(s)] = 1
    mask[1] = 0  # a row with nothing to score: its forward is skipped when it is alone
    for packing in (True, False):
        for max_tokens in (40, 64, 4096):
            calls.clear()
            with torch.no_grad():
                forward_tokens(model, sequences, mask, packing=packing, max_tokens=max_tokens)
            assert len(calls) == count_forwards(sequences, mask, packing=packing, max_tokens=max_tokens)


@pytest.mark.parametrize(
    ("backend", "max_staleness", "expected"),
    [
        ("vllm", 1, "none"),  # its own weights: a copy of the module would sit unused beside the engine
        ("transformers", 1, "copy"),  # samples a module that must not change while it samples
        ("transformers", 0, "the learner's"),  # one process, synchronous: the learner's own module
    ],
)
def test_the_rollout_side_gets_a_copy_of_the_model_only_when_it_samples_one(
    tmp_path, tiny_config, backend, max_staleness, expected
):
    import contextlib

    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.distributed import DistContext
    from agentgym_core.rl.trainer import _LocalRoles
    from agentgym_core.testing.tiny_model import tiny_chat_model

    pytest.importorskip(f"agentgym_backend_{backend}")
    pm = PluginManager(autoload=True, allow=["estimators", "transformers", "vllm"])
    config = tiny_config(tmp_path, **{"rollout.backend": backend, "rollout.max_staleness": max_staleness})
    model, tokenizer = tiny_chat_model(seed=0)
    roles = _LocalRoles(config, pm, DistContext(), model, tokenizer)
    with contextlib.ExitStack() as stack:
        roles.learner(stack)
    found = (
        "none" if roles.rollout_model is None else "the learner's" if roles.rollout_model is model else "copy"
    )
    assert found == expected


def test_each_spawned_rank_sees_one_gpu_of_its_own(monkeypatch):
    from agentgym_core.rl.distributed import pin_one_gpu, visible_gpus

    assert visible_gpus(None, 4) == ["0", "1", "2", "3"]
    assert visible_gpus("4,5, 6", 3) == ["4", "5", "6"]
    assert visible_gpus("", 0) == []  # GPUs hidden on purpose stay hidden
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    pin_one_gpu(visible_gpus("4,5,6", 3), 1)
    import os

    assert (os.environ["CUDA_VISIBLE_DEVICES"], os.environ["LOCAL_RANK"]) == ("5", "0")


def _untimed(record: dict) -> dict:
    """An evaluation record without its wall time (each process measures its own)."""
    return {key: value for key, value in record.items() if key != "wall_seconds"}


def test_two_ranks_each_evaluate_their_share_of_the_panel_and_report_what_one_process_reports(tmp_path):
    from eval_ranks import PANEL, WON, evaluate_panel

    alone = evaluate_panel(str(tmp_path / "alone"), 1)
    (tmp_path / "ranks").mkdir()
    spawn(evaluate_panel, 2, str(tmp_path / "ranks"), 2)
    ranks = [json.loads((tmp_path / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
    # Each rank's engine played only its share: panel episodes 0, 2, 4 and 1, 3.
    assert alone["reset_to"] == PANEL
    assert [r["reset_to"] for r in ranks] == [PANEL[0::2], PANEL[1::2]]
    # Greedy decoding: each task's trajectory holds the tokens it holds in one process, from the rank that played it.
    assert {**ranks[0]["tokens"], **ranks[1]["tokens"]} == alone["tokens"]
    assert len(alone["tokens"]) == len(PANEL)
    # The gathered record is the one-process record, task for task and in the panel's order, on every rank.
    for r in ranks:
        assert _untimed(r["record"]) == _untimed(alone["record"]) and r["record"]["wall_seconds"] > 0
        assert list(r["record"]["per_task"]) == [f"word:{t}" for t in PANEL]
    assert alone["record"]["per_task"] == {f"word:{t}": int(t in WON) for t in PANEL}
    assert alone["record"]["success"] == len(WON) / len(PANEL)


def test_the_ray_rollout_group_spreads_an_evaluation_over_its_workers_as_ranks_do(tmp_path):
    from eval_ranks import PANEL, evaluate_on_ray_group, evaluate_panel

    alone = evaluate_panel(str(tmp_path / "alone"), 1)
    group = evaluate_on_ray_group(str(tmp_path / "group"), 2)
    assert group["reset_to"] == PANEL[0::2] + PANEL[1::2]  # worker 0 played its share, then worker 1 (one process)
    assert group["tokens"] == alone["tokens"]
    assert _untimed(group["record"]) == _untimed(alone["record"]) and group["record"]["wall_seconds"] > 0
    assert list(group["record"]["per_task"]) == [f"word:{t}" for t in PANEL]  # the panel's order, not the workers'


@pytest.mark.slow
def test_two_ranks_with_asynchronous_rollouts_evaluate_together_without_waiting_on_each_other(tmp_path):
    from learner_ranks import run_ranks

    # Each rank's sampling thread runs a step ahead; an evaluation is collective, so it must start after the same
    # sampling collectives on every rank (a mismatch hangs until collective_timeout_s: 120 s here). Whether the
    # old timing-dependent start would mismatch depends on the machine's timing; test_async_rollouts.py checks the
    # deterministic start itself. This run checks the whole loop with both.
    run_dir = tmp_path / "run"
    run_ranks(2, str(run_dir), [*RANKS_LR, "rollout.max_staleness=1", "trainer.eval_every=1", "trainer.eval_tasks=3",
                                "trainer.collective_timeout_s=120"])
    evaluations = [x for x in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
                   if x["kind"] == "eval"]
    assert [(x["step"], x["tasks"]) for x in evaluations] == [(0, 3), (1, 3), (2, 3)]
    assert len(train_lines(run_dir)) == 2
