"""One way to open an environment by name, class or URL (``agentgym play``, ``eval``, ``collect``, the TRL shim)."""

from __future__ import annotations

import pytest

from agentgym_core.http.client import HTTPEnv
from agentgym_core.http.opening import env_factory
from agentgym_core.plugins import PluginManager
from agentgym_core.testing import serve_env

pytest.importorskip("agentgym_env_guess")
from agentgym_env_guess.env import GuessEnv  # noqa: E402


def test_a_name_a_class_and_a_url_open_the_same_environment():
    by_name = env_factory("guess", plugin_manager=PluginManager(autoload=True, allow=["guess"]),
                          env_kwargs={"high": 50})
    by_class = env_factory(GuessEnv, env_kwargs={"high": 50})
    assert by_name.env_class is not None and by_name.label == by_class.label == "guess"
    assert by_name.tasks() == by_class.tasks()
    with serve_env(GuessEnv, {"high": 50}) as url:
        by_url = env_factory("guess", url=url)
        remote, local = by_url(), by_class()
        try:
            assert isinstance(remote, HTTPEnv) and by_url.env_class is None and by_url.label == url
            assert by_url.tasks() == by_class.tasks()
            assert remote.reset(3).observation == local.reset(3).observation
        finally:
            remote.close()
            local.close()


def test_options_are_checked_once_and_refused_for_a_server():
    with pytest.raises(ValueError, match="--env-kwargs: environment 'guess' takes no option 'hihg'. Did you mean"):
        env_factory(GuessEnv, env_kwargs={"hihg": 5}, where="--env-kwargs")
    with pytest.raises(ValueError, match="agentgym serve ENV --env-kwargs"):
        env_factory("guess", url="http://127.0.0.1:1", env_kwargs={"high": 5})
    with pytest.raises(ValueError, match="no environment"):
        env_factory()


def test_tool_call_env_plays_through_the_act_tool_in_process_and_over_a_text_server():
    from agentgym_core.rollout.tool_calls import act_tool_schema, tool_call_env

    reply = '<tool_call>{"name": "act", "arguments": {"action": "guess 50"}}</tool_call>'
    with serve_env(GuessEnv) as url:
        for factory in (env_factory(GuessEnv, played_as=tool_call_env),
                        env_factory("guess", url=url, played_as=tool_call_env)):
            env = factory()
            try:
                assert env.tools == [act_tool_schema("guess")], factory.label
                env.reset(3)
                assert "The secret is" in env.step(env.parse_action(reply)).observation
                refused = env.step(env.parse_action("Action: guess 50"))
                assert refused.invalid_action is True and "Invalid tool call" in refused.observation
            finally:
                env.close()
        assert env_factory(GuessEnv)().tools is None  # text stays the default
