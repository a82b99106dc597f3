"""Environments say when they refused an action (``StepResult.invalid_action``): the contract, the checker,
the wire, the trainer's batch (the optional penalty) and the tables that report the rate."""

from __future__ import annotations

import pytest

from agentgym_core.env import StepResult
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn, invalid_action_rate
from agentgym_core.testing import check_env, check_env_http
from agentgym_core.testing.env_check import INVALID_ACTION, EnvContractError

guess = pytest.importorskip("agentgym_env_guess")


def test_step_results_default_to_no_verdict_and_old_answers_still_parse():
    assert StepResult(observation="ok").invalid_action is None
    # An answer from a server that predates the field (no key) is still a valid step result.
    assert StepResult.model_validate({"observation": "x", "reward": 0.0}).invalid_action is None


def test_check_env_sees_the_nonsense_action_refused_in_process_and_over_http():
    report = check_env_http(guess.GuessEnv)
    for episode in report.episodes:
        assert episode.steps[1][0] == INVALID_ACTION and episode.steps[1][6] is True
        assert episode.reports_invalid_actions


class _AcceptsEverything(guess.GuessEnv):
    """A broken env: answers the nonsense action as invalid in its text, but reports it accepted."""

    def step(self, action):
        result = super().step(action)
        return result.model_copy(update={"invalid_action": False})


class _SometimesSays(guess.GuessEnv):
    """A broken env: reports verdicts on valid guesses only, None on the refused one."""

    def step(self, action):
        result = super().step(action)
        return result.model_copy(update={"invalid_action": None}) if result.invalid_action else result


@pytest.mark.parametrize("env_cls", [_AcceptsEverything, _SometimesSays])
def test_check_env_rejects_an_env_that_does_not_report_the_refusal(env_cls):
    policy = lambda env, i, obs: INVALID_ACTION if i == 1 else "guess 50"  # noqa: E731
    with pytest.raises(EnvContractError, match="invalid_action"):
        check_env(env_cls, policy=policy)


def _turn(index: int, start: int, invalid: bool | None, reward: float = 0.0) -> Turn:
    return Turn(index=index, context_span=Span(start=start, end=start + 1),
                action_span=Span(start=start + 1, end=start + 3), text="x", action="x", finish_reason="eos",
                reward=reward, reward_index=start + 2, invalid_action=invalid)


def _traj(flags: list[bool | None], rewards: list[float] | None = None) -> Trajectory:
    rewards = rewards or [0.0] * len(flags)
    turns = [_turn(i, 3 * i, flag, r) for i, (flag, r) in enumerate(zip(flags, rewards, strict=True))]
    n = 3 * len(flags)
    mask = [0 if k % 3 == 0 else 1 for k in range(n)]
    return Trajectory(env="guess", task_id=1, token_ids=list(range(n)), loss_mask=mask, logprobs=[0.0] * n, turns=turns)


def test_the_rate_counts_turns_with_a_verdict_only():
    trajs = [_traj([True, False, None]), _traj([True, True])]
    assert invalid_action_rate(trajs) == pytest.approx(3 / 4)
    assert invalid_action_rate([_traj([None, None])]) is None  # an env that does not say has no rate
    assert trajs[1].invalid_actions == 2


def test_penalty_is_charged_on_the_refused_turn_only():
    from agentgym_core.rl.batch import build_batch

    traj = _traj([True, False], rewards=[0.5, 1.0])
    plain = build_batch([traj])
    charged = build_batch([traj], invalid_action_penalty=0.25)
    # Turn 0's reward sits on token 2, turn 1's on token 5 (each turn's last sampled token).
    assert plain.token_rewards[0, 2].item() == pytest.approx(0.5)
    assert charged.token_rewards[0, 2].item() == pytest.approx(0.25)
    assert charged.token_rewards[0, 5].item() == pytest.approx(1.0)
    assert traj.turns[0].reward == 0.5  # the trajectory keeps the environment's own reward


def test_training_metrics_have_the_rate_overall_and_per_env():
    from agentgym_core.evaluation.results import metric_record

    metrics = metric_record([_traj([True, False]), _traj([True, True])])
    assert metrics["invalid_action_rate"] == pytest.approx(0.75)
    assert metrics["guess/invalid_action_rate"] == pytest.approx(0.75)
    assert "invalid_action_rate" not in metric_record([_traj([None])])


def test_the_main_jobs_table_shows_the_rate_beside_success():
    from agentgym_core.commands.train import _success_table

    table = _success_table({"eval_before": {"babyai/success": 0.2, "babyai/invalid_action_rate": 0.11},
                            "eval_after": {"babyai/success": 0.225, "babyai/invalid_action_rate": 0.63}})
    rows = table.splitlines()
    assert rows[1].split()[0] == "babyai/invalid_action_rate" and rows[2].split()[0] == "babyai/success"
    assert "11.0%" in rows[1] and "63.0%" in rows[1] and "+52.0" in rows[1]


def test_agentgym_eval_reports_the_rate_beside_success(tmp_path):
    pytest.importorskip("agentgym_backend_transformers")
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.commands.eval import render_table
    from agentgym_core.evaluation import EvalConfig, evaluate
    from agentgym_core.testing.tiny_model import tiny_chat_model

    # A random tiny model never writes `guess N`: every turn is refused.
    config = EvalConfig(env="guess", limit=2, max_rounds=2, max_new_tokens=6, out_dir=str(tmp_path / "run"))
    results = evaluate(config, backend=TransformersBackend(*tiny_chat_model(seed=0)), make_env=guess.GuessEnv,
                       progress=False)
    assert results.overall.invalid_action_rate == 1.0
    assert [row["invalid_actions"] for row in results.per_task] == [2, 2]
    header, _, *rows = render_table(results).splitlines()
    assert header.split()[3:7] == ["success", "Avg@1", "success", "Pass@1"] and "invalid actions" in header
    assert rows[-1].split()[:6] == ["ALL", "2", "2", "0.0%", "0.0%", "100.0%"]


def test_budget_policies_keep_episodes_ended_at_a_refused_action_as_failures():
    from agentgym_core.rl.batch import apply_truncation_policy

    refused = _traj([False, True]).model_copy(update={"truncated": True, "truncation_reason": "invalid_action"})
    cut = _traj([False, False]).model_copy(update={"truncated": True, "truncation_reason": "max_turns"})
    assert apply_truncation_policy([refused, cut], "drop") == [refused]
    priced = apply_truncation_policy([refused, cut], -0.5)
    assert priced[0] is refused and priced[0].turns[-1].reward == 0.0
    assert priced[1].turns[-1].reward == -0.5


class _RefuseOnce:
    """A scripted chat player: ``Action: dance`` (refused) on turn ``refuse_on``, ``Action: guess 1`` otherwise."""

    name = "refuse-once"

    def __init__(self, refuse_on: int) -> None:
        self.refuse_on = refuse_on

    def chat(self, messages, params):
        from agentgym_core.rollout.text_engine import ChatReply

        turn = len(messages[2::2])  # replies so far
        action = "dance" if turn == self.refuse_on else "guess 1"
        return ChatReply(text=f"Thought: go.\nAction: {action}", finish_reason="eos", prompt_tokens=10,
                         completion_tokens=5)


@pytest.mark.parametrize("end_on_invalid", [False, True])
def test_the_text_engine_ends_an_episode_at_its_first_refused_action_when_asked(end_on_invalid):
    from agentgym_core.rollout import EngineConfig, EpisodeSpec, SamplingParams
    from agentgym_core.rollout.text_engine import TextRolloutEngine

    config = EngineConfig(sampling=SamplingParams(max_new_tokens=16), max_turns=10, step_timeout_s=10.0,
                          end_on_invalid_action=end_on_invalid)
    with TextRolloutEngine(_RefuseOnce(refuse_on=1), guess.GuessEnv, num_envs=2, config=config) as engine:
        trajs = engine.run([EpisodeSpec(task_id=t) for t in (3, 17)])
    for traj in trajs:
        flags = [turn.invalid_action for turn in traj.turns]
        assert flags[:2] == [False, True]  # one valid guess, then the refused reply
        if end_on_invalid:
            assert len(traj.turns) == 2 and traj.truncation_reason == "invalid_action" and not traj.success
        else:  # the episode plays on past the refusal
            assert len(traj.turns) > 2 and traj.truncation_reason != "invalid_action"


def test_the_token_engine_ends_an_episode_at_its_first_refused_action_when_asked():
    """The tiny random model's replies are mostly not ``guess N``: every episode stops at its first one."""
    from agentgym_backend_transformers import TransformersBackend
    from agentgym_core.rollout import EngineConfig, EpisodeSpec, RolloutEngine, SamplingParams
    from agentgym_core.testing.tiny_model import tiny_chat_model

    model, tokenizer = tiny_chat_model(seed=0)
    backend = TransformersBackend(model, tokenizer)
    ran = {}
    for end_on_invalid in (False, True):
        config = EngineConfig(sampling=SamplingParams(max_new_tokens=8, seed=0), max_turns=4, step_timeout_s=10.0,
                              end_on_invalid_action=end_on_invalid)
        with RolloutEngine(backend, guess.GuessEnv, num_envs=2, config=config) as engine:
            ran[end_on_invalid] = engine.run([EpisodeSpec(task_id=t) for t in range(6)])
    # Without the option the same replies run on past a refused action; with it, nothing follows one.
    assert any(True in [turn.invalid_action for turn in t.turns[:-1]] for t in ran[False])
    for traj in ran[True]:
        flags = [turn.invalid_action for turn in traj.turns]
        assert True not in flags[:-1]
        if flags[-1]:
            assert traj.truncation_reason == "invalid_action"
    assert any(t.truncation_reason == "invalid_action" for t in ran[True])
