"""A training run over three `agentgym serve babyai` processes, one of them killed mid-run.

The run must finish; the trajectories the dead server broke are counted (``infra_failed``) and
re-run on the others; every episode of every step is accounted for in the saved trajectories;
after the kill no new instance goes to the dead server.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest

pytest.importorskip("agentgym_env_babyai")
pytest.importorskip("agentgym_backend_transformers")
torch = pytest.importorskip("torch")

STEPS, TASKS, GROUP = 3, 3, 2


def _kill_during_second_rollout(process, run_dir, done: threading.Event) -> None:
    """Kill ``process`` shortly after step 1 is logged, i.e. while step 2's episodes are mid-flight."""
    metrics = run_dir / "metrics.jsonl"
    while not done.is_set():
        if metrics.exists() and '"kind": "train"' in metrics.read_text():
            time.sleep(0.3)  # step 2's resets are in; its episodes are waiting on the model or their env
            process.kill()
            return
        time.sleep(0.02)


def test_run_finishes_when_one_of_three_babyai_servers_dies(tmp_path, server_process):
    from agentgym_core.testing import serve_env
    from agentgym_env_babyai import BabyAIEnv

    torch.set_num_threads(1)
    # The one to kill is its own `agentgym serve` process; the two that live on serve in this process
    # (real HTTP servers on loopback, without two more interpreter start-ups).
    victim, port = server_process("babyai")
    victim_url = f"http://127.0.0.1:{port}"
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve_env(BabyAIEnv)), victim_url, stack.enter_context(serve_env(BabyAIEnv))]
        _train_and_check(tmp_path / "run", urls, victim, victim_url)


def _train_and_check(run_dir, urls, victim, victim_url):
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    config = load_config(None, [
        f"envs=[{{name: babyai, urls: {json.dumps(urls)}, max_concurrency: 6, probe_interval_s: 60}}]",
        f"trainer.run_dir={run_dir}", f"trainer.steps={STEPS}", "trainer.eval_tasks=0", "trainer.eval_before=false",
        "trainer.progress=false", "trainer.tensorboard=false", "trainer.save_every=100",
        f"rollout.tasks_per_step={TASKS}", f"rollout.group_size={GROUP}", "rollout.max_new_tokens=6",
        "rollout.max_total_tokens=2048", "rollout.env_timeout_s=20", "algorithm.rounds_ctrl.rounds=5",
        "algorithm.kl.coef=0",  # no reference forward: the update is most of a step here
    ])
    pm = PluginManager(autoload=True, allow=["estimators", "transformers", "babyai"])
    model, tokenizer = tiny_chat_model(seed=0)

    done = threading.Event()
    killer = threading.Thread(target=_kill_during_second_rollout, args=(victim, run_dir, done), daemon=True)
    killer.start()
    try:
        train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    finally:
        done.set()
        killer.join(timeout=5)
    assert victim.poll() is not None, "the server was never killed: the test did not test anything"

    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_lines = [x for x in lines if x["kind"] == "train"]
    assert [x["step"] for x in train_lines] == [1, 2, 3]  # the run finished

    broken_by_victim = 0
    for line in train_lines:
        saved = [json.loads(x) for x in
                 (run_dir / "trajectories" / f"step_{line['step']:06d}.jsonl").read_text().splitlines()]
        # Nothing silently dropped: every attempt is saved, every episode has one, failures are counted.
        assert len(saved) == TASKS * GROUP + line["reruns"] == line["trajectories"]
        episodes = {(t["task_id"], t["sample_index"]) for t in saved}
        assert len(episodes) == TASKS * GROUP
        failed = [t for t in saved if t["failed"]]
        assert len(failed) == line["infra_failed"]
        assert line["trained_trajectories"] <= len(saved) - len(failed)
        assert all(t["failure_reason"] for t in failed)
        broken_by_victim += sum(victim_url in t["failure_reason"] for t in failed)
        # An episode whose attempts all failed is counted as such, not lost.
        good = {(t["task_id"], t["sample_index"]) for t in saved if not t["failed"]}
        assert len(episodes - good) == line["failed_after_reruns"]

    second, third = train_lines[1], train_lines[2]
    assert broken_by_victim >= 1 and second["infra_failed"] >= 1  # killed mid-episode: those trajectories failed
    assert second["reruns"] >= 1 and second["failed_after_reruns"] == 0  # and were played again elsewhere
    assert second["pool/babyai/s1/errors"] >= 1 and second["pool/babyai/s1/down"] == 1
    # After the kill, new instances go to the two live servers only.
    assert third["pool/babyai/s1/instances"] == 0 and third["pool/babyai/s1/steps_per_s"] == 0
    assert third["infra_failed"] == 0
    assert third["pool/babyai/s0/steps_per_s"] > 0 and third["pool/babyai/s2/steps_per_s"] > 0
