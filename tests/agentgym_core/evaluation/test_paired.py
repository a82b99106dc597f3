import math

import pytest

from agentgym_core.evaluation.paired import mcnemar_exact_p, paired_difference, t_quantile_975


def test_paired_interval_hand_computed():
    before = {f"t{i}": 0 for i in range(10)}
    after = {**before, "t0": 1, "t1": 1, "t2": 1}  # 3 of 10 tasks gained, none lost
    out = paired_difference(before, after)
    # d = [1, 1, 1, 0 x 7]: mean .3, sample sd sqrt(.7 * .3 * 10 / 9); t_{.975, 9} = 2.262.
    half = 2.262 * math.sqrt(0.3 * 0.7 * 10 / 9) / math.sqrt(10)
    assert out["diff"] == pytest.approx(0.3)
    assert out["ci95"] == pytest.approx([0.3 - half, 0.3 + half])
    assert (out["n_tasks"], out["before"], out["after"], out["gained"], out["lost"]) == (10, 0.0, 0.3, 3, 0)
    assert out["interval"] == "paired t interval over tasks" and out["mcnemar_p"] == pytest.approx(2 / 8)


def test_pairing_only_uses_tasks_both_evaluated_and_a_tie_is_a_point():
    out = paired_difference({"a": 1, "b": 0, "c": 1}, {"a": 1, "b": 0, "z": 0})
    assert out["n_tasks"] == 2 and out["ci95"] == [0.0, 0.0]
    with pytest.raises(ValueError, match="at least 2 tasks"):
        paired_difference({"a": 1}, {"a": 0})


def test_t_quantiles_are_conservative_between_table_rows():
    assert t_quantile_975(99) == 1.990  # df 99 -> the df 80 row (a little above the exact 1.984)
    assert t_quantile_975(1000) == 1.96
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_mcnemar_is_the_two_sided_binomial_on_the_tasks_that_flipped():
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(5, 0) == pytest.approx(2 / 32)
    assert mcnemar_exact_p(3, 3) == 1.0
    assert mcnemar_exact_p(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)


def test_success_rates_pair_as_rates_and_get_no_mcnemar():
    # Avg@4 per task: a rate of 0.5 must count as 0.5, not as a success.
    before = {"a": 0.25, "b": 0.5, "c": 1.0, "d": 0.0}
    after = {"a": 0.75, "b": 0.5, "c": 0.75, "d": 0.0}
    out = paired_difference(before, after)
    d = [0.5, 0.0, -0.25, 0.0]
    mean = sum(d) / 4
    half = 3.182 * math.sqrt(sum((x - mean) ** 2 for x in d) / 3) / 2
    assert out["diff"] == pytest.approx(0.0625) and out["ci95"] == pytest.approx([mean - half, mean + half])
    assert (out["before"], out["after"], out["gained"], out["lost"]) == (0.4375, 0.5, 1, 1)
    assert out["mcnemar_p"] is None
    # Flags given as floats or bools are still flags: McNemar applies.
    assert paired_difference({"a": 0.0, "b": True}, {"a": 1.0, "b": True})["mcnemar_p"] == 1.0


def test_a_value_outside_zero_one_is_refused_by_name():
    with pytest.raises(ValueError, match=r"after: .*task 'b' has 2.0"):
        paired_difference({"a": 0, "b": 1}, {"a": 1, "b": 2.0})
