"""The learning figures the docs quote come from the JSON they cite, and recompute from its per-task rows.

Every ``bench/results/learn_*.json`` that ``bench/README.md`` names holds success per task for the
evaluations it compares; its headline (success at both ends, the paired change and its interval) is what
:func:`agentgym_core.evaluation.paired.paired_difference` gives on those rows, and the results page
(``docs/results.md``) quotes exactly those figures.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentgym_core.evaluation.paired import paired_difference

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BENCH_README = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
RESULTS_PAGE = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
QUOTED = sorted(set(re.findall(r"bench/results/(learn_\w+\.json)", BENCH_README)))


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _pairs(record: dict) -> list[tuple[str, dict, dict, dict]]:
    """(label, rows before, rows after, the paired figures stored) for every comparison the JSON states."""
    if "arms" not in record:  # `agentgym eval` results combined by hand: the rows beside each comparison
        pairs = [("sft -> rl", record["sft_per_task"], record["rl_per_task"], record["paired"])]
        if "base_per_task" in record:
            pairs += [("base -> sft", record["base_per_task"], record["sft_per_task"], record["paired_base_to_sft"]),
                      ("base -> rl", record["base_per_task"], record["rl_per_task"], record["paired_base_to_rl"])]
        return pairs
    first = record["arms"][0]
    # as the bench pairs them: every arm against the first arm's evaluation after SFT, which is its RL run's
    # evaluation before RL where the warm start logged none (a run resumed after its warm start)
    sft = first.get("eval_sft") or first["eval_before"]
    pairs = [(f"{arm['arm']}: sft -> rl", sft["per_task"], arm["eval_after"]["per_task"], arm["paired_vs_sft"])
             for arm in record["arms"]]
    pairs += [(f"{arm['arm']} vs {first['arm']}", first["eval_after"]["per_task"], arm["eval_after"]["per_task"],
               arm["paired_vs_first_arm"]) for arm in record["arms"][1:] if "paired_vs_first_arm" in arm]
    # an arm's checkpoint at the first arm's environment steps (--match-env-steps) against the first arm
    pairs += [(f"{arm['arm']} at step {m['step']} vs {first['arm']}", first["eval_after"]["per_task"],
               m["eval"]["per_task"], m["paired_vs_first_arm"])
              for arm in record["arms"] if (m := arm.get("at_matched_env_steps")) and "per_task" in m["eval"]]
    # a run resumed past an earlier run's last checkpoint: that evaluation against this one
    pairs += [(f"{arm['arm']}: step {arm['eval_earlier']['step']} -> rl", arm["eval_earlier"]["per_task"],
               arm["eval_after"]["per_task"], arm["paired_vs_earlier"]) for arm in record["arms"] if "eval_earlier" in arm]
    return pairs


def test_the_benchmark_notebook_cites_learning_results():
    assert len(QUOTED) >= 10, QUOTED
    assert all((RESULTS / name).exists() for name in QUOTED), [n for n in QUOTED if not (RESULTS / n).exists()]


@pytest.mark.parametrize("name", QUOTED)
def test_every_quoted_figure_recomputes_from_the_per_task_rows(name):
    record = _load(name)
    for label, before, after, stored in _pairs(record):
        assert len(before) >= 2 and set(before) == set(after), f"{name}, {label}: no paired per-task rows"
        assert all(v in (0, 1, True, False) for v in [*before.values(), *after.values()]), name
        again = paired_difference(before, after)
        for key in ("n_tasks", "gained", "lost"):
            assert again[key] == stored[key], (name, label, key)
        for key in ("before", "after", "diff"):
            assert again[key] == pytest.approx(stored[key]), (name, label, key)
        assert again["ci95"] == pytest.approx(stored["ci95"]), (name, label)
    for arm in record.get("arms", []):
        for which in ("eval_base", "eval_sft", "eval_after"):
            evaluation = arm.get(which)
            if evaluation and "per_task" in evaluation:  # the success rate is the mean of its rows
                rows = evaluation["per_task"]
                assert evaluation["success"] == pytest.approx(sum(rows.values()) / len(rows)), (name, which)
    if "arms" in record:  # the headline is the arm it names
        arm = next(a for a in record["arms"] if a["arm"] == record["arm"])
        paired = arm["paired_vs_sft"]
        assert (record["n_tasks"], record["diff"], record["diff_ci95"]) == \
            (paired["n_tasks"], pytest.approx(paired["diff"]), pytest.approx(paired["ci95"]))
        assert (record["sft_success"], record["rl_success"]) == \
            (pytest.approx(paired["before"]), pytest.approx(paired["after"]))


@pytest.mark.parametrize("name", [n for n in QUOTED if any("eval_earlier" in a for a in _load(n).get("arms", []))])
def test_an_earlier_checkpoints_rows_are_the_ones_its_own_json_holds(name):
    for arm in _load(name)["arms"]:
        if "eval_earlier" in arm:
            earlier = json.loads((ROOT / arm["eval_earlier"]["from"]).read_text(encoding="utf-8"))
            assert arm["eval_earlier"]["per_task"] == earlier["arms"][0]["eval_after"]["per_task"], name


def _points(x: float) -> str:
    return f"{100 * x:+.1f}".replace("-", "\N{MINUS SIGN}")


# (JSON, which comparison, how the results page writes success at both ends)
RESULTS_PAGE_ROWS = [
    ("learn_main_job_intel.json", "sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_main_job_intel_seed1.json", "sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_main_job_shipped_constrained.json", "sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_main_job.json", "sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_main_job_all_levels.json", "sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_main_job_penalty.json", "sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_babyai.json", "scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_babyai_fixed.json", "fixed: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_babyai_vs_fixed.json", "fixed vs scaling_inter", "{b}/{n} vs {a}/{n}"),
    ("learn_textcraft_partial_20.json", "partial_credit_scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textcraft.json", "scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textcraft_scaling_long.json", "long_scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textcraft_scaling_long.json", "long_fixed: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textcraft_scaling_long.json", "long_fixed vs long_scaling_inter", "{b}/{n} vs {a}/{n}"),
    ("learn_textcraft_scaling_long.json", "long_fixed at step 8 vs long_scaling_inter", "{b}/{n} vs {a}/{n}"),
    ("learn_textworld_short.json", "scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textworld_short_all100.json", "sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textworld_constrained.json", "constrained_scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textworld_constrained_16.json", "constrained_scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textworld_constrained_16.json", "constrained_scaling_inter: step 8 -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_textworld.json", "scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
    ("learn_reasoning_gym.json", "scaling_inter: sft -> rl", "{b}/{n} → {a}/{n}"),
]


@pytest.mark.parametrize(("name", "label", "counts"), RESULTS_PAGE_ROWS, ids=[r[0] for r in RESULTS_PAGE_ROWS])
def test_the_results_page_quotes_what_the_rows_give(name, label, counts):
    before, after, _ = next((b, a, s) for lab, b, a, s in _pairs(_load(name)) if lab == label)
    paired = paired_difference(before, after)
    n = paired["n_tasks"]
    success = counts.format(b=round(paired["before"] * n), a=round(paired["after"] * n), n=n)
    change = f"{_points(paired['diff'])} points, [{_points(paired['ci95'][0])}, {_points(paired['ci95'][1])}]"
    assert success in RESULTS_PAGE, (name, success)
    assert change in RESULTS_PAGE, (name, change)


PAIRED_EVALS = sorted(set(re.findall(r"bench/results/(paired_evals_\w+\.json)", BENCH_README)))


@pytest.mark.parametrize("name", PAIRED_EVALS)
def test_paired_evaluations_recompute_from_their_rows(name):
    """bench/paired_evals.py's JSON: each panel's change, and the change over all of them, from the rows."""
    record = _load(name)
    before, after = {}, {}
    comparisons = []
    for panel in record["panels"]:
        comparisons.append((panel["before_per_task"], panel["after_per_task"], panel["paired"]))
        before.update(panel["before_per_task"])
        after.update(panel["after_per_task"])
    comparisons.append((before, after, record["paired"]))
    for rows_before, rows_after, stored in comparisons:
        again = paired_difference(rows_before, rows_after)
        assert (again["n_tasks"], again["gained"], again["lost"]) == \
            (stored["n_tasks"], stored["gained"], stored["lost"]), name
        assert again["ci95"] == pytest.approx(stored["ci95"]) and again["diff"] == pytest.approx(stored["diff"]), name


def test_the_bench_readme_quotes_paired_evaluations():
    # the parametrized check above runs once per file the README names; none found would check nothing
    assert len(PAIRED_EVALS) >= 2, PAIRED_EVALS


SAMPLED = sorted(set(re.findall(r"bench/results/(main_job_sampled\w*\.json)", BENCH_README)))


@pytest.mark.parametrize("name", SAMPLED)
def test_sampled_evaluations_recompute_from_their_samples(name, bench_script):
    """bench/main_job_sampled.py's JSON: each run's Avg@K change and both intervals, from every sample's 0/1."""
    script = bench_script("main_job_sampled")
    record = _load(name)
    for run, row in record["runs"].items():
        before, after = row["sft_samples"], row["rl_samples"]
        assert len(before) >= 40 and set(before) == set(after), (name, run)
        assert {len(s) for s in [*before.values(), *after.values()]} == {record["samples"]}, (name, run)
        assert all(v in (0, 1) for s in [*before.values(), *after.values()] for v in s), (name, run)
        again = paired_difference(script.rates(before), script.rates(after))
        stored = row["paired"]
        assert (again["gained"], again["lost"], again["mcnemar_p"]) == (stored["gained"], stored["lost"], None)
        for key in ("before", "after", "diff"):
            assert again[key] == pytest.approx(stored[key]), (name, run, key)
        assert again["ci95"] == pytest.approx(stored["ci95"]), (name, run)
        assert script.bootstrap_ci95(script.rates(before), script.rates(after)) == pytest.approx(row["bootstrap_ci95"])
        levels = row["levels"]  # each category's rate pools its tasks' samples
        for end, samples in (("sft", before), ("rl", after)):
            assert row["level_rates"][end] == pytest.approx(script.level_rates(samples, levels)), (name, run, end)
            opened = {level: sum(moves.values()) for level, moves in row["first_moves"][end].items()}
            assert opened == {level: sum(len(samples[t]) for t in levels if levels[t] == level)
                              for level in set(levels.values())}, (name, run, end)  # every episode's opening counted
        quoted = f"{_points(again['diff'])} points, [{_points(again['ci95'][0])}, {_points(again['ci95'][1])}]"
        assert quoted in " ".join(RESULTS_PAGE.split()), (name, run, quoted)  # the results page quotes every run's change
        if row.get("trainer_after"):  # the trainer's own Avg@K against agentgym eval's of the saved checkpoint
            own = row["trainer_after"]
            assert own["eval_success"] == pytest.approx(sum(map(sum, after.values())) / (record["samples"] * len(after)))
            for task, (trainer_rate, eval_rate) in own["tasks_differing"].items():
                assert trainer_rate != eval_rate == pytest.approx(script.rates(after)[task]), (name, run, task)


def test_the_bootstrap_interval_brackets_the_mean_and_is_seeded(bench_script):
    script = bench_script("main_job_sampled")
    before = {f"t{i}": 0.0 for i in range(30)}
    after = {f"t{i}": (1.0 if i < 6 else 0.0) for i in range(30)}
    low, high = script.bootstrap_ci95(before, after)
    assert 0.0 <= low < 0.2 < high <= 0.5
    assert script.bootstrap_ci95(before, after) == [low, high]
    assert script.bootstrap_ci95(before, before) == [0.0, 0.0]
