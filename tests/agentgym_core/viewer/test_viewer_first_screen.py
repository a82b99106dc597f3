"""The viewer's first screen in headless Chromium: what a reader came for first, the rest folded,
labels a person can read, a loading state, and tokens nothing trained on labelled so.

Runs are written as agentgym writes them (``viewer_runs``); screenshots go to
``test-artifacts/viewer/`` at the repository root.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from viewer_runs import trajectories, write_trainer_step

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "viewer"


def _shot(pg, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def training_run(run_dir: Path, steps: int = 4) -> Path:
    """metrics.jsonl as the trainer writes it: moving losses and outcomes, counters that stay 0, a
    constant learning rate, a skipped update at the last step, and held-out evaluations."""
    run_dir.mkdir(parents=True)
    lines = []
    for s in range(1, steps + 1):
        lines.append(
            {
                "step": s,
                "kind": "train",
                "time_step": 30.0 + s,
                "turns": 2.0 + s % 2,
                "horizon": 4.0,
                "entropy": 2.0 - 0.1 * s,
                "kl": 0.01 * s,
                "grad_norm": 1.0 / s,
                "pool/word/s0/steps_per_s": 5.0 + s,
                "lr": 1e-6,
                "infra_failed": 0.0,
                "reruns": 0.0,
                "failed_after_reruns": 0.0,
                "staleness_mean": 0.0,
                "pool/word/s0/errors": 0.0,
                "pool/word/s0/down": 0.0,
                "trajectories": 16.0,
                "my_plugin_rate": 0.0,
                "skipped_update": 1.0 if s == steps else 0.0,
                "success": 0.1 * s,
                "reward": 0.2 * s - 0.1,
                "pg_loss": 0.05 / s,
                "kl_loss": 0.002 * s,
                "word/success": 0.1 * s,
            }
        )
    lines += [
        {"step": s, "kind": "eval", "success": 0.05 * s, "reward": 0.1 * s, "tasks": 8.0} for s in (0, steps)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for s in range(1, steps + 1):
        write_trainer_step(run_dir, s, trajectories(8, seed=s))
    return run_dir


def test_first_screen_shows_outcomes_and_losses_first_and_folds_quiet_charts(page, serve_viewer, tmp_path):
    base = serve_viewer(training_run(tmp_path / "run"))
    page.goto(f"{base}/#run=.")
    page.wait_for_selector("body[data-ready='1']")
    sections = page.locator("details.chart-section").evaluate_all("els => els.map(e => e.dataset.section)")
    assert sections[0] == "headline" and sections[-1] == "quiet"
    first = page.locator("details[data-section=headline] .chart").evaluate_all(
        "els => els.map(e => e.dataset.metric)"
    )
    assert first == ["success", "reward", "pg_loss", "kl_loss"]
    # The headline is the first thing on screen: its charts sit above every other chart.
    tops = page.locator(".chart").evaluate_all(
        "els => els.map(e => [e.dataset.metric, e.getBoundingClientRect().top])"
    )
    headline_bottom = max(top for key, top in tops if key in first)
    assert all(top > headline_bottom for key, top in tops if key not in first)

    quiet = page.locator("details[data-section=quiet]")
    assert quiet.evaluate("e => e.open") is False  # folded away
    folded = {
        "lr",
        "infra_failed",
        "reruns",
        "failed_after_reruns",
        "staleness_mean",
        "pool/word/s0/errors",
        "pool/word/s0/down",
        "trajectories",
        "my_plugin_rate",
        "horizon",
        "tasks",
    }
    assert quiet.locator("summary").inner_text().startswith(f"{len(folded)} quiet charts")
    charted = set(quiet.locator(".chart").evaluate_all("els => els.map(e => e.dataset.metric)"))
    assert charted == folded
    assert not page.locator("details[data-section=quiet] .chart").first.is_visible()

    # Axis labels are HTML in CSS pixels: at least 11 px, whatever the chart's width.
    sizes = page.locator(".chart .yaxis span, .chart .xaxis span").evaluate_all(
        "els => els.filter(e => e.offsetParent).map(e => parseFloat(getComputedStyle(e).fontSize))"
    )
    assert sizes and min(sizes) >= 11
    heights = page.locator("details[data-section=headline] .chart .yaxis span").evaluate_all(
        "els => els.map(e => e.getBoundingClientRect().height)"
    )
    assert min(heights) >= 11
    _shot(page, "first-screen")

    quiet.locator("summary").click()  # a reader can still open them, and the page keeps that
    assert page.locator("details[data-section=quiet] .chart[data-metric=lr]").is_visible()
    _shot(page, "first-screen-quiet-open")


def test_token_view_shows_loading_then_labels_a_skipped_update_not_trained(page, serve_viewer, tmp_path):
    base = serve_viewer(training_run(tmp_path / "run"))
    held = []
    page.route("**/api/tokens?*", lambda route: held.append(route))  # the answer waits until released
    page.goto(f"{base}/#run=.&step=4&i=0")
    page.wait_for_selector("#detail .turn")
    page.click("button[data-view=tokens]")
    page.wait_for_selector("#token-loading")
    assert "Loading the token view" in page.inner_text("#view")
    _shot(page, "tokens-loading")
    assert held
    held[0].continue_()
    page.wait_for_selector(".tokens")
    assert page.locator("#token-loading").count() == 0
    legend = page.inner_text("#token-legend")
    assert "not trained: this step's update was skipped" in legend and "trained, advantage" not in legend
    assert "none trained" in page.inner_text("#token-stats")
    assert (
        page.locator(".tokens .skip").count() > 0 and page.locator(".tokens .pos, .tokens .neg").count() == 0
    )
    _shot(page, "tokens-skipped-update")

    page.unroute("**/api/tokens?*")
    page.goto(f"{base}/#run=.&step=3&i=0&view=tokens")  # a step that was trained: coloured by advantage
    from playwright.sync_api import expect

    # A hash change keeps step 4's token view on screen until step 3's arrives: wait for the new legend.
    expect(page.locator("#token-legend")).to_contain_text("trained, advantage")
    assert page.locator(".tokens .skip").count() == 0


def test_a_collection_is_labelled_collection_not_evaluation(page, serve_viewer, tmp_path):
    from viewer_runs import write_log_run

    run = tmp_path / "collect-textcraft"
    write_log_run(run, trajectories(4))
    (run / "collect_config.json").write_text(json.dumps({"env": "textcraft", "policy": "expert", "n": 4}))
    base = serve_viewer(tmp_path)
    page.goto(f"{base}/#run=collect-textcraft")
    page.wait_for_selector("#list tbody tr")
    assert page.inner_text("#run-kind") == "collection"
    assert page.locator("#steps button").all_inner_texts()[0].startswith("collect")
    page.locator("#list tbody tr").first.click()
    page.wait_for_selector("#detail .turn")
    assert "· collect" in page.inner_text("#detail h2") and "eval" not in page.inner_text("#detail h2")
    _shot(page, "collect-run")


# The first two lines of a real run's metrics.jsonl (a 3-step GRPO run of the tiny model on WordEnv,
# tests/agentgym_core/viewer/viewer_runs.py), as a reader sees them after one training step.
ONE_STEP = [
    {"step": 0, "kind": "eval", "horizon": 2, "tasks": 2, "success": 0.0, "reward": -0.2, "turns": 2.0, "failed": 0.0,
     "truncated": 2.0, "word/success": 0.0, "word/reward": -0.2, "word/turns": 2.0, "word/failed": 0.0,
     "word/truncated": 2.0, "per_task": {"word:16": 0, "word:17": 0}, "panel_hash": "a774ac2915e0007f",
     "peak_rss_gb": 0.406},
    {"step": 1, "kind": "train", "success": 0.0, "reward": -0.1417, "turns": 2.0, "failed": 0.0, "truncated": 6.0,
     "word/success": 0.0, "word/reward": -0.1417, "word/turns": 2.0, "word/failed": 0.0, "word/truncated": 6.0,
     "kl_loss": 0.0, "pg_loss": 0.0448, "clip_frac": 0.0, "dual_clip_frac": 0.0, "approx_kl": 0.0, "grad_norm": 1.273,
     "update_seconds": 0.0702, "update_tokens": 781.0, "update_tokens_per_s": 11117.9, "optimizer_steps": 1.0,
     "horizon": 2.0, "lr": 0.01, "trajectories": 6.0, "trained_trajectories": 6.0, "infra_failed": 0.0,
     "skipped_update": 0.0, "sampled_tokens": 67.0, "entropy": 5.975, "rollout_logprob_gap": 1.42e-07,
     "sampler_ratio_mean": 1.0000001, "sampler_ratio_max": 1.0000005, "sampler_ratio_over_cap": 0.0,
     "sampler_kl": 0.0, "kl": 0.0, "advantage_abs_mean": 0.6418, "staleness_mean": 0.0, "staleness_max": 0.0,
     "time_rollout": 0.324, "time_generation": 0.183, "time_env": 0.0949, "generation_calls": 67.0, "reruns": 0.0,
     "failed_after_reruns": 0.0, "pool/word/s0/steps_per_s": 36.99, "pool/word/s0/errors": 0.0,
     "pool/word/s0/instances": 1.0, "pool/word/s0/down": 0.0, "peak_rss_rollout_gb": 0.407,
     "peak_rss_update_gb": 0.4265, "time_step": 1.263},
]


def test_after_one_step_the_loss_charts_are_above_the_fold_and_every_title_fits(browser, serve_viewer, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in ONE_STEP))
    write_trainer_step(run, 1, trajectories(6, seed=1))
    base = serve_viewer(run)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        pg = context.new_page()
        pg.goto(f"{base}/#run=.")
        pg.wait_for_selector("body[data-ready='1']")
        _shot(pg, "one-step-1280x800")
        # Counters of things that did not happen (all 0) are folded, not drawn before the losses.
        quiet = set(pg.locator("details[data-section=quiet] .chart").evaluate_all("els => els.map(e => e.dataset.metric)"))
        assert {"failed_after_reruns", "infra_failed", "reruns", "sampler_ratio_over_cap", "skipped_update",
                "staleness_mean", "staleness_max", "clip_frac"} <= quiet
        assert pg.locator("details[data-section=quiet]").evaluate("e => e.open") is False
        box = pg.locator(".chart[data-metric=pg_loss]").bounding_box()
        assert box["y"] + box["height"] <= 800, f"pg_loss ends at {box['y'] + box['height']:.0f} px, below the fold"
        for key in ("entropy", "advantage_abs_mean", "rollout_logprob_gap"):  # the update's own section: on screen too
            chart = pg.locator(f".chart[data-metric={key}]").bounding_box()
            assert chart["y"] + chart["height"] <= 800, key
        # Every title fits its card, and every card its grid: nothing clipped at the right edge.
        overflow = pg.locator(".chart").evaluate_all("""els => els.filter(e => e.offsetParent).flatMap(e => {
            const card = e.getBoundingClientRect(), grid = e.parentElement.getBoundingClientRect();
            const title = e.querySelector('.title'), name = e.querySelector('.title .name');
            const bad = [];
            if (card.right > grid.right + 0.5) bad.push('card past its grid');
            if (title.scrollWidth > title.clientWidth || name.getBoundingClientRect().right > card.right)
              bad.push('title past its card');
            return bad.map(b => e.dataset.metric + ': ' + b);
        })""")
        assert not overflow, overflow
        assert pg.locator(".chart[data-metric='pool/word/s0/steps_per_s']").is_visible()
        pg.locator(".chart[data-metric='pool/word/s0/steps_per_s']").scroll_into_view_if_needed()
        _shot(pg, "one-step-pool-charts")
    finally:
        context.close()


def test_special_tokens_show_as_tokens_not_as_thought_text(page, serve_viewer, tmp_path):
    # Backends decode replies with their special tokens kept (the text matches the trained tokens), so a
    # Qwen reply ends in <|im_end|>; one turn also has no "Action:" marker, so all of it is the thought.
    trajs = trajectories(1, seed=3)
    turns = trajs[0].turns
    assert len(turns) >= 2
    turns[0].text = "Thought: the planks are in the chest.<|im_end|>"
    turns[1].text = "Thought: craft now. Action: craft 1 stick<|im_end|><|endoftext|>"
    run = tmp_path / "run"
    write_trainer_step(run, 1, trajs)
    base = serve_viewer(run)
    page.goto(f"{base}/#run=.&step=1&i=0")
    page.wait_for_selector("#detail .turn")
    thoughts = page.locator("#detail .thought").all_inner_texts()
    assert thoughts[0] == "the planks are in the chest."
    assert not any("<|" in t for t in thoughts), thoughts
    chips = page.locator("#detail .turn[data-turn='0'] .special-token").all_inner_texts()
    assert chips == ["<|im_end|>"]
    assert page.locator("#detail .turn[data-turn='1'] .special-token").all_inner_texts() == [
        "<|im_end|>", "<|endoftext|>"]
    _shot(page, "special-tokens")
