"""GEM's end states in agentgym's terms, and GEM's own tool wrappers (python, search, mcp) behind the adapter."""

from __future__ import annotations

import http.server
import json
import re
import threading

import pytest

pytest.importorskip("gem")

from agentgym_env_gem import GemEnv, task_id_of  # noqa: E402

CHAIN_SUM = task_id_of("rg:chain_sum", 3)
QUESTION_SUM = "3832 - 9072 + 5665 + 4551 + 6774 + 4366"  # the question of that task


def test_a_single_turn_answer_terminates_without_truncation_or_gems_marker():
    env = GemEnv(env_ids=["rg:chain_sum"])
    assert QUESTION_SUM in env.reset(CHAIN_SUM).observation
    right = env.step(f"Action: \\boxed{{{eval(QUESTION_SUM)}}}")
    assert (right.observation, right.terminated, right.truncated, right.success) == ("Correct.", True, False, True)
    env.reset(CHAIN_SUM)
    wrong = env.step("Action: \\boxed{1}")
    assert (wrong.observation, wrong.terminated, wrong.truncated, wrong.success) == ("Incorrect.", True, False, False)
    assert "TERMINAL_STATE" not in right.observation + wrong.observation


def test_a_game_out_of_turns_is_a_terminated_loss_flagged_out_of_turns():
    env = GemEnv(env_ids=["game:GuessTheNumber-v0-easy"])
    env.reset(task_id_of("game:GuessTheNumber-v0-easy", 3))
    for _ in range(10):
        result = env.step("\\boxed{1}")
        if result.done:
            break
    assert result.terminated and not result.truncated and result.success is False
    assert result.info["out_of_turns"] is True and "maximum number of turns" in result.observation


def test_the_python_tool_runs_code_and_its_call_is_a_valid_action():
    env = GemEnv(env_ids=["rg:chain_sum"], tools={"python": {"timeout": 10}})
    first = env.reset(CHAIN_SUM)
    assert "<python>" in first.observation  # GEM's tool instruction comes with the question
    ran = env.step(f"<python>print({QUESTION_SUM})</python>")
    assert ran.observation.strip() == f"Code execution result: {eval(QUESTION_SUM)}"
    assert not ran.done and ran.invalid_action is False and ran.info["tool_type"] == "python_code"
    answered = env.step(f"\\boxed{{{eval(QUESTION_SUM)}}}")
    assert answered.success is True and answered.terminated and not answered.truncated
    env.reset(CHAIN_SUM)
    assert env.step("I am not sure.").invalid_action is True  # neither a tool call nor an answer


class _Retriever(http.server.BaseHTTPRequestHandler):
    """A retrieval server speaking GEM SearchTool's protocol: msgpack {query, topk} in, {result: [...]} out."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        import msgspec

        query = msgspec.msgpack.decode(self.rfile.read(int(self.headers["Content-Length"])))["query"]
        body = msgspec.msgpack.encode({"result": [{"document": {"contents": f"Arithmetic\n{query} is 16116"}}]})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_search_tool_queries_the_configured_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Retriever)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/retrieve"
        env = GemEnv(env_ids=["rg:chain_sum"], tools={"search": {"search_url": url}})
        env.reset(CHAIN_SUM)
        found = env.step("<search>the sum</search>")
        assert "Doc 1(Title: Arithmetic) the sum is 16116" in found.observation
        assert found.info["tool_type"] == "search" and found.invalid_action is False
    finally:
        server.shutdown()
        thread.join()


def test_the_mcp_tool_plays_an_agentgym_server_through_its_mcp_endpoint():
    """GEM's MCPTool against a real MCP server on 127.0.0.1: agentgym's own /mcp face of a served environment."""
    pytest.importorskip("fastmcp", reason="GEM's MCPTool needs fastmcp (pip install 'gem-llm[mcp]')")
    pytest.importorskip("mcp", reason="agentgym's /mcp endpoint needs the mcp package")
    pytest.importorskip("agentgym_env_guess")
    from agentgym_core.testing import serve_env
    from agentgym_env_guess.env import GuessEnv

    def call(tool: str, **arguments: object) -> str:
        return f"<tool_call><tool_name>{tool}</tool_name><arguments>{json.dumps(arguments)}</arguments></tool_call>"

    with serve_env(GuessEnv) as url:
        env = GemEnv(env_ids=["rg:chain_sum"], tools={"mcp": {"config": f"{url}/mcp"}})
        first = env.reset(CHAIN_SUM)
        assert '"name": "step"' in first.observation  # the server's tools, listed in GEM's tool instruction
        started = env.step(call("reset", task_id=3))
        assert "task_id=3" in started.observation and started.info["tool_type"] == "mcp"
        assert started.invalid_action is False and not started.done
        episode = int(re.search(r"episode=(\d+)", started.observation).group(1))
        stepped = env.step(call("step", episode=episode, action="guess 50"))
        assert "The secret is" in stepped.observation and stepped.invalid_action is False
        env.close()


def test_unknown_tools_are_refused_by_name():
    with pytest.raises(ValueError, match="GEM's tools are python, search, mcp"):
        GemEnv(tools={"shell": {}})
