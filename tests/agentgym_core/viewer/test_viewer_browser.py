"""The page in headless Chromium, over a run made by a real tiny training and a real evaluation.

Debian's ``/usr/bin/chromium`` driven by Playwright (never ``playwright install``). Screenshots go
to ``test-artifacts/viewer/`` at the repository root.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "viewer"


@pytest.fixture(scope="module")
def run_root(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright")
    pytest.importorskip("agentgym_estimators")
    pytest.importorskip("agentgym_backend_transformers")
    from viewer_runs import tiny_training_run

    return tiny_training_run(tmp_path_factory.mktemp("viewer-runs"))


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, serve_viewer):
    """A page that records console errors; the test fails if there are any.

    It depends on ``serve_viewer`` so that it closes before the server stops (the page polls).
    """
    context = browser.new_context(viewport={"width": 1500, "height": 950})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(15_000)
    yield pg
    context.close()
    assert not errors, f"console errors: {errors}"


def _shot(pg, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def _open(pg, base, run):
    pg.goto(f"{base}/#run={run}")
    pg.wait_for_selector("body[data-ready='1']")
    pg.wait_for_selector("#list tbody tr")


def test_training_run_filter_open_tokens_compare(page, run_root, serve_viewer):
    base = serve_viewer(run_root)
    _open(page, base, "train")
    # Curves: the six training plots, with a point per step.
    assert page.locator(".chart").count() == 6
    assert page.locator(".chart[data-metric='KL'] circle.pt").count() == 3
    assert page.locator("#steps button").all_inner_texts() == ["step 1", "step 2", "step 3 · 6 · 0%"]
    _shot(page, "1-run")

    # Filter to failed trajectories (a random tiny model fails them all), then by turns and task.
    page.select_option("#filters select[name=success]", "1")
    assert page.locator("#list tbody tr").count() == 0
    page.select_option("#filters select[name=success]", "0")
    assert page.locator("#list tbody tr").count() == 6
    page.fill("#filters input[name=task]", "1")
    assert page.locator("#list tbody tr").count() == 3
    assert set(page.locator("#list tbody tr td:nth-child(3)").all_inner_texts()) == {"1"}
    assert "3 of 6 shown" in page.inner_text("#list-count")

    # Open one: turn by turn.
    page.locator("#list tbody tr").first.click()
    page.wait_for_selector("#detail .turn")
    assert page.locator("#detail .turn").count() == 2
    assert "failed" in page.inner_text("#detail h2 + div")
    assert "It starts with" in page.inner_text("#detail .turn >> nth=0")
    _shot(page, "2-trajectory")

    # Token view: context grey, trained tokens coloured by the sign of the advantage the trainer logged.
    page.click("button[data-view=tokens]")
    page.wait_for_selector(".tokens")
    trained = page.locator(".tokens .pos, .tokens .neg").count()
    assert trained > 0 and page.locator(".tokens .ctx").count() > trained
    assert "<|im_start|>" in page.inner_text(".tokens")  # decoded with the checkpoint's tokenizer
    assert "advantages as logged by the trainer" in page.inner_text("#token-stats")
    _shot(page, "3-tokens")

    # Compare the same task at two steps.
    page.click("button[data-view=compare]")
    page.wait_for_selector("#cmp-a .turn")
    page.wait_for_selector("#cmp-b .turn")
    a, b = page.input_value("select[name=cmp-a]"), page.input_value("select[name=cmp-b]")
    assert (a, b) == ("1", "3")
    page.select_option("select[name=cmp-a]", "2")
    page.wait_for_function("document.querySelector('#cmp-a .samples') !== null")
    page.locator("#cmp-b .samples button").nth(2).click()
    page.wait_for_selector("#cmp-b .samples button.sel >> nth=0")
    assert page.locator("#cmp-b .samples button").nth(2).get_attribute("class") == "sel"
    _shot(page, "4-compare")


def test_eval_results_open_in_the_same_viewer(page, run_root, serve_viewer):
    base = serve_viewer(run_root)
    _open(page, base, "eval")
    assert "evaluation" in page.inner_text("#run-kind")
    table = page.inner_text("#results")
    assert "ALL" in table and "Avg@2" in table
    assert page.locator("#list tbody tr").count() == 8
    page.locator("#list tbody tr").nth(1).click()
    page.wait_for_selector("#detail .turn")
    page.click("button[data-view=tokens]")
    page.wait_for_selector("#token-stats")
    # `agentgym eval` logs without tokens today: the page says why instead of failing.
    assert "no tokens" in page.inner_text("#token-stats")
    _shot(page, "5-eval")


def test_a_running_training_updates_without_reload(page, run_root, serve_viewer, tmp_path):
    live = tmp_path / "live"
    shutil.copytree(run_root / "train", live, ignore=shutil.ignore_patterns("step_000003*"))
    lines = (live / "metrics.jsonl").read_text().splitlines()
    (live / "metrics.jsonl").write_text("".join(x + "\n" for x in lines if json.loads(x)["step"] <= 2))
    base = serve_viewer(live)
    _open(page, base, ".")
    page.evaluate("window.__sameDocument = true")
    assert page.locator("#steps button").count() == 2
    assert page.locator(".chart[data-metric='entropy'] circle.pt").count() == 2
    # The trainer finishes step 3.
    shutil.copy(run_root / "train" / "trajectories" / "step_000003.jsonl", live / "trajectories")
    step3 = [x for x in (run_root / "train" / "metrics.jsonl").read_text().splitlines()
             if json.loads(x) == {**json.loads(x), "step": 3, "kind": "train"}]
    with (live / "metrics.jsonl").open("a") as f:
        f.write(step3[0] + "\n")
    # Watching the newest step (no trajectory open), the page follows the run to step 3.
    page.wait_for_selector("#steps button.sel[data-step='3']", timeout=10_000)
    page.wait_for_function("document.querySelectorAll('#list tbody tr').length === 6")
    page.wait_for_function("document.querySelectorAll(\".chart[data-metric='entropy'] circle.pt\").length === 3")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    assert "updated" in page.inner_text("#live")
    _shot(page, "6-live")


def test_babyai_map_is_drawn_from_step_info(page, serve_viewer, tmp_path):
    """A real BabyAI episode's info['grid'] is drawn as a map in the turn view."""
    import random

    from viewer_runs import make_trajectory, write_trainer_step

    from agentgym_env_babyai import BabyAIEnv

    env = BabyAIEnv()
    env.reset(1804)
    grids = [env.step(action).info["grid"] for action in ("turn left", "move forward")]
    env.close()
    traj = make_trajectory(random.Random(0), env="babyai", task_id=1804, sample_index=0, turns=2, success=False,
                           grids=grids)
    write_trainer_step(tmp_path / "grid", 1, [traj])
    base = serve_viewer(tmp_path)
    _open(page, base, "grid")
    page.locator("#list tbody tr").first.click()
    page.wait_for_selector("#detail .turn")
    maps = page.locator("table.grid-map")
    assert maps.count() == 2
    height, width = len(grids[0]), len(grids[0][0]) // 2
    assert maps.first.locator("tr").count() == height
    assert maps.first.locator("td").count() == height * width
    assert maps.first.locator("td.g-agent").count() == 1
    assert "grid" not in page.inner_text("#detail .turn .info")
    _shot(page, "babyai-map")
