import math

import torch

from agentgym_core.plugins import PluginManager
from agentgym_core.rl import AdvantageBatch, AdvantageConfig, check_estimator, place_rewards
from agentgym_core.rollout.trajectory import Span, Trajectory, Turn
from agentgym_estimators import gigpo
from agentgym_estimators.gigpo import GiGPOOptions, step_advantages, turn_returns


def _two_paths_batch() -> AdvantageBatch:
    """One task, two samples, both starting in state S. Row 0 wastes a turn (S -> S) then solves it
    (S -> goal); row 1 solves it at once (S -> goal). A third row fails in 2 turns (S -> T -> T)."""
    # Tokens: 0 prompt | 1-2 turn 0 | 3 obs | 4-5 turn 1 | 6 pad
    mask = torch.tensor([
        [0, 1, 1, 0, 1, 1, 0],
        [0, 1, 1, 0, 0, 0, 0],
        [0, 1, 1, 0, 1, 1, 0],
    ], dtype=torch.bool)
    rewards = place_rewards(mask, [1.0, 1.0, 0.0], [[0.0, 0.0], [0.0], [0.0, 0.0]])
    return AdvantageBatch(
        token_rewards=rewards, response_mask=mask, group_ids=torch.tensor([5, 5, 5]),
        turn_spans=[[(1, 3), (4, 6)], [(1, 3)], [(1, 3), (4, 6)]],
        turn_states=[["S", "S"], ["S"], ["S", "T"]])


def test_turn_returns_discount_per_turn():
    assert turn_returns([0.0, 0.0, 1.0], 0.5) == [0.25, 0.5, 1.0]
    assert turn_returns([], 0.9) == []


def test_step_groups_compare_turns_in_the_same_state_hand_computed():
    batch = _two_paths_batch()
    options = GiGPOOptions(step_gamma=0.5, step_weight=1.0)
    out = gigpo(batch, options)
    # Episode level (GRPO): scores 1, 1, 0 -> mean 2/3, unbiased std sqrt(1/3).
    std_e = math.sqrt(1 / 3)
    a_e = [(1 - 2 / 3) / std_e, (1 - 2 / 3) / std_e, (0 - 2 / 3) / std_e]
    # Step group (task 5, "S") holds four turns: row 0 turn 0 (return .5: one wasted turn before
    # the success), row 0 turn 1 (1), row 1 turn 0 (1), row 2 turn 0 (0). "T" has one turn: 0.
    returns = torch.tensor([0.5, 1.0, 1.0, 0.0], dtype=torch.float64)
    a_s = ((returns - returns.mean()) / returns.std()).tolist()
    expected = {(0, 0): a_e[0] + a_s[0], (0, 1): a_e[0] + a_s[1], (1, 0): a_e[1] + a_s[2],
                (2, 0): a_e[2] + a_s[3], (2, 1): a_e[2] + 0.0}
    for (row, turn), value in expected.items():
        start, end = batch.turn_spans[row][turn]
        assert torch.allclose(out.advantages[row, start:end], torch.tensor(value, dtype=torch.float32), atol=1e-5)
    # The wasted turn is credited less than the turn that solved the task from the same state.
    assert out.advantages[0, 1] < out.advantages[0, 4]
    assert (out.advantages[~batch.response_mask] == 0).all()


def test_without_states_it_is_grpo():
    batch = _two_paths_batch()
    plain = AdvantageBatch(token_rewards=batch.token_rewards, response_mask=batch.response_mask,
                           group_ids=batch.group_ids)
    from agentgym_estimators import grpo

    assert torch.equal(gigpo(plain, GiGPOOptions()).advantages, grpo(plain, AdvantageConfig()).advantages)
    no_weight = gigpo(batch, GiGPOOptions(step_weight=0.0)).advantages
    assert torch.equal(no_weight, grpo(batch, AdvantageConfig()).advantages)


def test_unnamed_states_and_lone_states_get_no_step_advantage():
    out = step_advantages([[1.0, 0.0], [0.0]], [[None, "x"], ["y"]], [0, 0], norm_by_std=True, eps=1e-6)
    assert out == [[0.0, 0.0], [0.0]]
    # Different tasks never share a step group even under the same state name.
    out = step_advantages([[1.0], [0.0]], [["s"], ["s"]], [0, 1], norm_by_std=False, eps=1e-6)
    assert out == [[0.0], [0.0]]


def test_gigpo_conforms_and_declares_its_options():
    check_estimator(gigpo, GiGPOOptions())
    check_estimator(gigpo, GiGPOOptions(norm_by_std=False, step_weight=0.5))
    registered = PluginManager(autoload=True, allow=["estimators"]).registration("advantage_estimator", "gigpo")
    assert registered.declared("options") is GiGPOOptions and registered.declared("min_group_size") == 2


def test_trajectory_names_the_state_each_turn_acted_in():
    def turn(i: int, state: str | None) -> Turn:
        return Turn(index=i, context_span=Span(start=0, end=0), action_span=Span(start=0, end=1), text="",
                    action="", finish_reason="eos", reward_index=0, info={} if state is None else {"state_key": state})

    traj = Trajectory(env="e", task_id=0, start_state="s0", turns=[turn(0, "s1"), turn(1, None), turn(2, "s3")])
    # Turn 0 acts in the reset's state, turn k in the state step k-1 left it in; the last step's state is unused.
    assert traj.turn_states() == ["s0", "s1", None]
