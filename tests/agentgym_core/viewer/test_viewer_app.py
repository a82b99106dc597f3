"""The viewer's HTTP API, served on loopback: contents, tokens, screenshots, live stamp, and 404s."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time

import httpx
import pytest
from viewer_runs import make_trajectory, trajectories, write_log_run, write_metrics, write_trainer_step

from agentgym_core.cli import main


@pytest.fixture
def train_run(tmp_path):
    run = tmp_path / "run"
    write_metrics(run, 2)
    write_trainer_step(run, 1, trajectories(16, seed=1))
    write_trainer_step(run, 2, trajectories(16, seed=2))
    return run


def test_run_overview_lists_steps_and_curves(serve_viewer, train_run):
    base = serve_viewer(train_run)
    runs = httpx.get(f"{base}/api/runs").json()
    assert runs["runs"] == [{"name": ".", "kind": "train"}]
    ov = httpx.get(f"{base}/api/run", params={"run": "."}).json()
    assert [s["step"] for s in ov["steps"]] == [1, 2]
    assert ov["metrics"]["train"]["entropy"] == [1.9, 1.8]
    page = httpx.get(f"{base}/")
    assert page.status_code == 200 and "agentgym viewer" in page.text
    assert httpx.get(f"{base}/assets/app.js").headers["content-type"].startswith("text/javascript")


def test_trajectory_turn_by_turn(serve_viewer, train_run):
    base = serve_viewer(train_run)
    rows = httpx.get(f"{base}/api/trajectories", params={"step": 2}).json()["rows"]
    assert len(rows) == 16
    row = next(r for r in rows if r["turns"] >= 2)
    d = httpx.get(f"{base}/api/trajectory", params={"step": 2, "i": row["i"]}).json()
    assert d["task_id"] == row["task_id"] and len(d["turns_detail"]) == row["turns"]
    first = d["turns_detail"][0]
    assert first["thought"].startswith("step 0 of task") and first["action"] == "inventory"
    assert first["observation"].startswith("Inventory:")
    # Done flags belong to the last turn only.
    assert [t["terminated"] or t["truncated"] for t in d["turns_detail"]] == [False] * (row["turns"] - 1) + [True]
    assert d["prompt"][0]["role"] == "system"


def test_a_trajectory_with_tools_shows_their_schemas_in_both_log_layouts(serve_viewer, tmp_path):
    from agentgym_core.rollout.tool_calls import act_tool_schema

    with_tools, plain = trajectories(2)
    with_tools = with_tools.model_copy(update={"tools": [act_tool_schema("textcraft")]})
    write_trainer_step(tmp_path / "train", 1, [with_tools, plain])
    write_log_run(tmp_path / "eval", [with_tools, plain])
    base = serve_viewer(tmp_path)
    for run, step in (("train", 1), ("eval", -1)):
        shown = [httpx.get(f"{base}/api/trajectory", params={"run": run, "step": step, "i": i}).json()["tools"]
                 for i in (0, 1)]
        assert shown == [[act_tool_schema("textcraft")], None], run


def test_token_view_signs_follow_the_group_baseline(serve_viewer, train_run):
    base = serve_viewer(train_run)
    rows = httpx.get(f"{base}/api/trajectories", params={"step": 1}).json()["rows"]
    group = [r for r in rows if r["task_id"] == rows[0]["task_id"]]
    mean = sum(r["reward"] for r in group) / len(group)
    checked = 0
    for r in group:
        tv = httpx.get(f"{base}/api/tokens", params={"step": 1, "i": r["i"]}).json()
        assert tv["available"] and tv["advantage_source"] == "derived"
        assert len(tv["token_ids"]) == len(tv["loss_mask"]) == len(tv["advantages"])
        trained = [a for a, m in zip(tv["advantages"], tv["loss_mask"], strict=True) if m]
        assert all(a == 0 for a, m in zip(tv["advantages"], tv["loss_mask"], strict=True) if not m)
        expected = r["reward"] - mean
        assert trained and all(a == pytest.approx(expected) for a in trained)
        checked += expected != 0
        assert tv["text"] is None  # no tokenizer on disk: the page shows ids
    assert checked, "the fixture should have a group with different rewards"


def test_logged_advantages_and_text_win_over_derived(serve_viewer, tmp_path):
    import json

    traj = trajectories(2)[0]
    path = write_trainer_step(tmp_path, 1, [traj, traj])
    record = json.loads(path.read_text().splitlines()[0])
    record["advantages"] = [(-0.5 if m else 0.0) for m in record["loss_mask"]]
    record["text"] = [f"<{t}>" for t in record["token_ids"]]
    path.write_text(json.dumps(record) + "\n")
    tv = httpx.get(f"{serve_viewer(tmp_path)}/api/tokens", params={"step": 1, "i": 0}).json()
    assert tv["advantage_source"] == "logged" and tv["text_source"] == "logged"
    assert tv["text"][0] == f"<{traj.token_ids[0]}>" and min(tv["advantages"]) == -0.5


def test_eval_log_without_tokens_says_so(serve_viewer, tmp_path):
    write_log_run(tmp_path, trajectories(4), include_tokens=False)
    (tmp_path / "results.json").write_text('{"overall": {"tasks": 1}}')
    base = serve_viewer(tmp_path)
    ov = httpx.get(f"{base}/api/run").json()
    assert ov["kind"] == "eval" and ov["results"] == {"overall": {"tasks": 1}}
    assert [s["label"] for s in ov["steps"]] == ["eval"]
    tv = httpx.get(f"{base}/api/tokens", params={"step": -1, "i": 0}).json()
    assert tv["available"] is False and "include_tokens" in tv["reason"]


def test_screenshot_from_turn_info(serve_viewer, tmp_path):
    import random

    jpeg = b"\xff\xd8\xff\xe0fake-jpeg-bytes"
    traj = make_trajectory(random.Random(0), env="webarena", task_id=3, sample_index=0, turns=2, success=True,
                           screenshot=base64.b64encode(jpeg).decode())
    write_trainer_step(tmp_path, 1, [traj])
    base = serve_viewer(tmp_path)
    d = httpx.get(f"{base}/api/trajectory", params={"step": 1, "i": 0}).json()
    assert d["turns_detail"][1]["has_screenshot"] and "screenshot" not in (d["turns_detail"][1]["info"] or {})
    shot = httpx.get(f"{base}/api/screenshot", params={"step": 1, "i": 0, "turn": 1})
    assert shot.status_code == 200 and shot.content == jpeg and shot.headers["content-type"] == "image/jpeg"
    assert httpx.get(f"{base}/api/screenshot", params={"step": 1, "i": 0, "turn": 5}).status_code == 404


def test_compare_finds_the_task_at_every_step(serve_viewer, train_run):
    data = httpx.get(f"{serve_viewer(train_run)}/api/task", params={"env": "babyai", "task": 0}).json()
    assert [s["step"] for s in data["steps"]] == [1, 2]
    assert all(r["task_id"] == 0 and r["env"] == "babyai" for s in data["steps"] for r in s["rows"])


def test_stamp_changes_when_the_run_grows(serve_viewer, train_run):
    base = serve_viewer(train_run)
    before = httpx.get(f"{base}/api/stamp").json()["stamp"]
    assert httpx.get(f"{base}/api/stamp").json()["stamp"] == before
    write_trainer_step(train_run, 3, trajectories(4))
    after = httpx.get(f"{base}/api/stamp").json()["stamp"]
    assert after != before
    assert [s["step"] for s in httpx.get(f"{base}/api/run").json()["steps"]] == [1, 2, 3]


@pytest.mark.parametrize(("path", "params", "says"), [
    ("/api/run", {"run": "../.."}, "no run named '../..'"),
    ("/api/run", {"run": "/etc"}, "no run named '/etc'"),
    ("/api/trajectories", {"step": 7}, "no trajectories for step 7 (steps: 1, 2)"),
    ("/api/trajectory", {"step": 1, "i": 99}, "trajectory 99 not in step_000001.jsonl (it has 16)"),
    ("/assets/..%2F..%2Fapp.py", {}, "no asset named"),
    ("/assets/%2Fetc%2Fpasswd", {}, "no asset named"),
    ("/nowhere", {}, "Not Found"),
])
def test_bad_paths_are_clear_404s(serve_viewer, train_run, path, params, says):
    response = httpx.get(f"{serve_viewer(train_run)}{path}", params=params)
    assert response.status_code == 404
    assert says in response.json()["detail"]


def test_view_command_explains_a_missing_directory(tmp_path, capsys):
    assert main(["view", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_view_command_serves_on_loopback(train_run):
    proc = subprocess.Popen([sys.executable, "-m", "agentgym_core.cli", "view", str(train_run), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert url, line
        for _ in range(200):
            try:
                runs = httpx.get(f"{url.group(0)}/api/runs", timeout=1).json()
                break
            except httpx.TransportError:
                time.sleep(0.05)
        assert runs["runs"] == [{"name": ".", "kind": "train"}]
    finally:
        proc.terminate()
        proc.wait(10)


def test_eval_include_tokens_from_the_cli_feeds_the_token_view(serve_viewer, tmp_path):
    """`agentgym eval --include-tokens` of a saved model: tokens in the log, decoded with that model's tokenizer."""
    pytest.importorskip("agentgym_backend_transformers")
    from viewer_runs import _eval_checkpoint

    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "rl"))  # WordEnv
    _eval_checkpoint(tmp_path / "model", tmp_path / "eval")
    first = json.loads((tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()[0])
    assert set(first["tokens"]) >= {"token_ids", "loss_mask", "logprobs"}
    base = serve_viewer(tmp_path / "eval")
    tv = httpx.get(f"{base}/api/tokens", params={"step": -1, "i": 0}).json()
    assert tv["available"] and tv["text_source"].endswith("model/tokenizer.json")
    assert "".join(tv["text"]).count("<|im_start|>") >= 2 and tv["advantages"] is None
    assert sum(tv["loss_mask"]) == first["mask"]["sampled"] > 0
