"""A training run over three BabyAI servers, one of them (an `agentgym serve` process) killed mid-run.

The run must finish; the trajectories the dead server broke are counted (``infra_failed``) and
re-run on the others; every episode of every step is accounted for in the saved trajectories;
after the kill no new instance goes to the dead server.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest

pytest.importorskip("agentgym_env_babyai")
pytest.importorskip("agentgym_backend_transformers")
torch = pytest.importorskip("torch")

STEPS, TASKS, GROUP = 3, 3, 2


class KillingRelay:
    """A loopback TCP relay in front of a server that kills the server under a step request once armed.

    After ``arm(kill)``, the next step request to arrive is held, ``kill`` runs (the server process
    dies), and only then is the request passed on: that step can never be answered, so the kill lands
    mid-episode however fast or slow the machine is. (Killing *after* a step had gone through raced the
    server: on a fast CPU the answer, and with it the episode's last step, could beat the kill.)
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port, self._kill = upstream_port, None
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, kill) -> None:
        self._kill = kill

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
            except OSError:
                client.close()  # the server is gone: the client sees its connection dropped
                continue
            for source, sink, requests in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(source, sink, requests), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        try:
            while data := source.recv(65536):
                if requests and b"/step HTTP/1.1" in data:
                    with self._lock:  # exactly one request is the one held under the kill
                        kill, self._kill = self._kill, None
                    if kill is not None:
                        kill()  # before the request goes on: the dead server cannot answer it
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self._listener.close()


def _arm_after_first_step(process, relay: KillingRelay, run_dir, done: threading.Event) -> None:
    """Arm the relay once step 1 is logged: the victim's next step request (one of step 2's) kills it."""
    metrics = run_dir / "metrics.jsonl"
    while not done.is_set() and not (metrics.exists() and '"kind": "train"' in metrics.read_text()):
        time.sleep(0.01)

    def kill() -> None:
        process.kill()
        process.wait(timeout=30)

    if not done.is_set():
        relay.arm(kill)


@pytest.mark.slow  # ~40 s: an `agentgym serve` start-up and three training steps
def test_run_finishes_when_one_of_three_babyai_servers_dies(tmp_path, server_process):
    from agentgym_core.testing import serve_env
    from agentgym_env_babyai import BabyAIEnv

    torch.set_num_threads(1)
    # The one to kill is its own `agentgym serve` process; the two that live on serve in this process
    # (real HTTP servers on loopback, without two more interpreter start-ups).
    victim, port = server_process("babyai")
    relay = KillingRelay(port)
    with contextlib.ExitStack() as stack:
        stack.callback(relay.close)
        urls = [stack.enter_context(serve_env(BabyAIEnv)), relay.url, stack.enter_context(serve_env(BabyAIEnv))]
        _train_and_check(tmp_path / "run", urls, victim, relay)


def _train_and_check(run_dir, urls, victim, relay):
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
    arming = threading.Thread(target=_arm_after_first_step, args=(victim, relay, run_dir, done), daemon=True)
    arming.start()
    try:
        train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    finally:
        done.set()
        arming.join(timeout=5)
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
        broken_by_victim += sum(relay.url in t["failure_reason"] for t in failed)
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
