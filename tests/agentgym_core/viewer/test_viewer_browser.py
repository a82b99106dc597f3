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
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "viewer"


@pytest.fixture(scope="module")
def run_root(tmp_path_factory):
    """Two real tiny trainings (seeds 0 and 1) and a real `agentgym eval --include-tokens`, shared by the module."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright")
    pytest.importorskip("agentgym_estimators")
    pytest.importorskip("agentgym_backend_transformers")
    from viewer_runs import tiny_training_run

    return tiny_training_run(tmp_path_factory.mktemp("viewer-runs"))


def _shot(pg, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def _hash(pg) -> dict[str, str]:
    return dict(pg.evaluate("[...new URLSearchParams(location.hash.slice(1)).entries()]"))


def _open(pg, base, run):
    pg.goto(f"{base}/#run={run}")
    pg.wait_for_selector("body[data-ready='1']")
    pg.wait_for_selector("#list tbody tr")


def _metric_keys(run_dir: Path) -> tuple[set[str], set[str], int]:
    """(numeric train keys, numeric eval keys, number of eval lines) of a run's metrics.jsonl."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = {"train": set(), "eval": set()}
    for line in lines:
        keys[line["kind"]] |= {k for k, v in line.items()
                               if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return keys["train"], keys["eval"], sum(line["kind"] == "eval" for line in lines)


def test_every_metric_of_metrics_jsonl_has_a_chart(page, run_root, serve_viewer):
    base = serve_viewer(run_root)
    _open(page, base, "train")
    train, evaluation, eval_lines = _metric_keys(run_root / "train")
    # The trainer logs losses, optimizer state and timings, not only rollout outcomes.
    assert {"pg_loss", "kl_loss", "lr", "grad_norm", "clip_frac", "time_step", "word/success"} <= train
    charted = set(page.locator(".chart").evaluate_all("els => els.map(e => e.dataset.metric)"))
    assert charted == train | evaluation
    for key in sorted(train | evaluation):
        chart = page.locator(f".chart[data-metric='{key}']")
        assert chart.locator("polyline").count() >= 1, key
        assert chart.locator("circle.pt.train").count() == (3 if key in train else 0), key
        assert chart.locator("rect.pt.eval").count() == (eval_lines if key in evaluation else 0), key
    sections = page.locator("details.chart-section").evaluate_all("els => els.map(e => e.dataset.section)")
    # Success, reward and losses first; charts that never changed (lr of a constant schedule, counters of
    # features that are off) folded last. "pool": the env pool's per-server figures (pool/word/s0/...).
    assert sections[0] == "headline" and sections[-1] == "quiet"
    assert set(sections) <= {"headline", "rollout", "loss", "optimizer", "timing", "eval", "pool", "word", "quiet"}
    headline = page.locator("details[data-section=headline] .chart").evaluate_all("els => els.map(e => e.dataset.metric)")
    assert headline[:2] == ["success", "reward"] and {"pg_loss", "kl_loss"} <= set(headline)
    assert page.locator("details[data-section=quiet] .chart[data-metric=lr]").count() == 1
    _shot(page, "0-charts")


def test_training_run_filter_open_tokens_compare(page, run_root, serve_viewer):
    base = serve_viewer(run_root)
    _open(page, base, "train")
    assert page.locator(".chart[data-metric='kl'] circle.pt").count() == 3
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
    # Wait for the clicked button itself: the previously selected one also matches "button.sel" until
    # the panel re-renders, so waiting for any selected button raced the click.
    page.wait_for_function("document.querySelectorAll('#cmp-b .samples button')[2]?.classList.contains('sel')")
    assert page.locator("#cmp-b .samples button").nth(2).get_attribute("class") == "sel"
    _shot(page, "4-compare")


def test_runs_overlay_on_the_charts_and_their_configs_side_by_side(page, run_root, serve_viewer):
    base = serve_viewer(run_root)
    _open(page, base, "train")
    # Only the listed run is drawn until another is ticked.
    assert page.locator(".chart[data-metric=reward] polyline.train").count() == 1
    page.check("input[data-overlay='train-seed1']")
    page.wait_for_function("location.hash.includes('overlay=train-seed1')")
    page.wait_for_selector(".chart[data-metric=reward] polyline.train[data-run='train-seed1']")
    for key in ("reward", "pg_loss", "grad_norm", "time_step"):
        runs = page.locator(f".chart[data-metric='{key}'] polyline.train").evaluate_all(
            "els => els.map(e => [e.dataset.run, e.getAttribute('stroke')])")
        assert [r for r, _ in runs] == ["train", "train-seed1"], key
        assert runs[0][1] != runs[1][1], "each run has its own colour"
    # The seed-1 run's reward curve is its own, not a copy of the seed-0 one.
    lines = page.locator(".chart[data-metric=grad_norm] polyline.train").evaluate_all(
        "els => els.map(e => e.getAttribute('points'))")
    assert lines[0] != lines[1]

    # Config: every key of config.yaml, one column per shown run; the keys that differ are marked.
    page.click("#config-panel summary")
    table = page.locator("#config-table")
    table.wait_for()
    assert table.locator("tr[data-key='optim.lr'] td").all_inner_texts() == ["optim.lr", "0.01", "0.01"]
    seed = table.locator("tr[data-key='trainer.seed']")
    assert seed.locator("td").all_inner_texts() == ["trainer.seed", "0", "1"]
    assert seed.get_attribute("class") == "diff"
    assert table.locator("tr[data-key='optim.lr']").get_attribute("class") == ""
    page.check("#config-diff")
    keys = table.locator("tbody tr").evaluate_all("els => els.map(e => e.dataset.key)")
    assert "trainer.seed" in keys and "optim.lr" not in keys
    _shot(page, "7-overlay-config")

    # A point of the overlaid run opens that run (the one listed before stays overlaid).
    page.locator(".chart[data-metric=reward] circle.pt.train[data-run='train-seed1'][data-step='2']").click()
    page.wait_for_function("new URLSearchParams(location.hash.slice(1)).get('run') === 'train-seed1'")
    assert _hash(page)["overlay"] == "train" and _hash(page)["step"] == "2"
    page.wait_for_selector("#steps button.sel[data-step='2']")
    assert page.input_value("#run-select") == "train-seed1"


def test_eval_points_open_that_evaluation(page, run_root, serve_viewer):
    base = serve_viewer(run_root)
    _open(page, base, "train")
    before = page.evaluate("location.hash")
    page.locator(".chart[data-metric=success] rect.pt.eval[data-step='2']").click()
    page.wait_for_selector("#eval-point")
    assert "Evaluation at step 2" in page.inner_text("#eval-point")
    evaluation = [json.loads(x) for x in (run_root / "train" / "metrics.jsonl").read_text().splitlines()
                  if json.loads(x)["kind"] == "eval"]
    at2 = next(x for x in evaluation if x["step"] == 2)
    row = page.locator("table.eval-point tr[data-key='word/reward'] td").all_inner_texts()
    assert row[0] == "word/reward" and float(row[1]) == pytest.approx(at2["word/reward"], abs=1e-3)
    # Numbers only: not per_task (a dict), nor panel_hash (the evaluated tasks' hash, a string).
    scalars = [k for k, v in at2.items() if k not in ("step", "kind") and not isinstance(v, (dict, str))]
    assert page.locator("table.eval-point tbody tr").count() == len(scalars)
    assert "eval=2" in page.evaluate("location.hash")
    assert page.locator(".chart[data-metric=success] rect.pt.eval.picked").count() == 1
    page.wait_for_selector("#steps button.sel[data-step='2']")  # the training step it followed is listed
    _shot(page, "8-eval-point")
    page.go_back()
    page.wait_for_function(f"location.hash === {json.dumps(before)}")
    page.wait_for_selector("#eval-point", state="detached")


def test_eval_run_token_view(page, run_root, serve_viewer):
    """`agentgym eval --include-tokens` logs tokens; the page decodes them with the --model directory's tokenizer."""
    base = serve_viewer(run_root)
    _open(page, base, "eval")
    page.locator("#list tbody tr").nth(1).click()
    page.wait_for_selector("#detail .turn")
    page.click("button[data-view=tokens]")
    page.wait_for_selector(".tokens")
    stats = page.inner_text("#token-stats")
    assert "token text from" in stats and "tokenizer.json" in stats
    assert "none trained: nothing is trained in an evaluation" in stats  # sampled tokens are not "trained"
    assert "not trained" in page.inner_text("#token-legend") and "trained, advantage" not in page.inner_text("#token-legend")
    sampled = page.locator(".tokens .skip").count()
    assert sampled > 0 and page.locator(".tokens .ctx").count() > sampled
    assert "<|im_start|>" in page.inner_text(".tokens")
    _shot(page, "9-eval-tokens")


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
    assert page.locator(".tokens").count() == 1  # logged with --include-tokens
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


def test_the_url_keeps_the_view(page, run_root, serve_viewer):
    """Run, overlay, step, filters, open trajectory and tab live in the hash: reload and back/forward keep them."""
    base = serve_viewer(run_root)
    page.goto(f"{base}/#run=train&overlay=train-seed1&step=2&success=0&task=1&i=4&view=tokens")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector(".tokens")

    def view():
        return {
            "run": page.input_value("#run-select"),
            "overlaid": page.locator(".chart[data-metric=reward] polyline.train").evaluate_all(
                "els => els.map(e => e.dataset.run)"),
            "step": page.get_attribute("#steps button.sel", "data-step"),
            "filters": (page.input_value("#filters select[name=success]"), page.input_value("#filters input[name=task]")),
            "rows": page.locator("#list tbody tr").count(),
            "open": page.get_attribute("#list tbody tr.sel", "data-i") if page.locator("#list tr.sel").count() else None,
            "tab": page.get_attribute("#detail .tabs button.sel", "data-view") if page.locator(".tabs").count() else None,
        }

    deep = {"run": "train", "overlaid": ["train", "train-seed1"], "step": "2", "filters": ("0", "1"), "rows": 3,
            "open": "4", "tab": "tokens"}
    assert view() == deep
    _shot(page, "10-url-state")
    page.reload()
    page.wait_for_selector(".tokens")
    assert view() == deep

    # Navigate: another step (the filters stay), then another run by editing the hash by hand.
    page.click("#steps button[data-step='1']")
    page.wait_for_selector("#steps button.sel[data-step='1']")
    page.wait_for_selector("#detail .tabs", state="detached")
    at_step1 = view()
    assert at_step1["filters"] == ("0", "1") and at_step1["open"] is None and at_step1["rows"] == 3
    page.evaluate("location.hash = '#run=train-seed1&step=3'")
    page.wait_for_function("document.querySelector('#run-select').value === 'train-seed1'")
    page.wait_for_selector("#steps button.sel[data-step='3']")
    assert page.locator(".chart[data-metric=reward] polyline.train").evaluate_all(
        "els => els.map(e => e.dataset.run)") == ["train-seed1"]

    page.go_back()
    page.wait_for_selector("#steps button.sel[data-step='1']")
    page.wait_for_function("document.querySelector('#run-select').value === 'train'")
    assert view() == at_step1
    page.go_back()
    page.wait_for_selector(".tokens")
    assert view() == deep
    page.go_forward()
    page.wait_for_selector("#steps button.sel[data-step='1']")
    assert view() == at_step1


def test_a_run_started_after_the_page_opened_appears_live(page, run_root, serve_viewer, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(run_root / "train", root / "first")
    base = serve_viewer(root)
    page.goto(f"{base}/")
    page.wait_for_selector("body[data-ready='1']")
    page.evaluate("window.__sameDocument = true")
    assert page.locator("#run-select option").all_inner_texts() == ["first · train"]
    # A second training starts: its directory gets a config and a first metrics line.
    (root / "second").mkdir()
    shutil.copy(run_root / "train-seed1" / "config.yaml", root / "second")
    first_line = (run_root / "train-seed1" / "metrics.jsonl").read_text().splitlines()[0]
    (root / "second" / "metrics.jsonl").write_text(first_line + "\n")
    page.wait_for_function("document.querySelectorAll('#run-select option').length === 2", timeout=10_000)
    assert page.locator("#run-select option").all_inner_texts() == ["first · train", "second · train"]
    page.check("input[data-overlay='second']")
    page.wait_for_selector(".chart[data-metric=success] rect.pt.eval[data-run='second']")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    _shot(page, "11-new-run")


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


def test_the_tools_given_to_the_model_are_shown_collapsed_above_the_first_turn(page, serve_viewer, tmp_path):
    import random

    from viewer_runs import make_trajectory, write_trainer_step

    from agentgym_core.rollout.tool_calls import act_tool_schema

    traj = make_trajectory(random.Random(0), env="textcraft", task_id=7, sample_index=0, turns=2, success=True)
    write_trainer_step(tmp_path / "tools", 1, [traj.model_copy(update={"tools": [act_tool_schema("textcraft")]})])
    write_trainer_step(tmp_path / "plain", 1, [traj])
    base = serve_viewer(tmp_path)
    _open(page, base, "tools")
    page.locator("#list tbody tr").first.click()
    page.wait_for_selector("#detail .turn")
    tools = page.locator("#detail details.tools")
    assert tools.count() == 1 and tools.get_attribute("open") is None  # collapsed until clicked
    assert "tools given to the model (1): act" in tools.locator("summary").inner_text()
    # above the first turn: it precedes it in the page
    assert page.evaluate("""() => {
        const tools = document.querySelector('#detail details.tools'), turn = document.querySelector('#detail .turn');
        return !!(tools.compareDocumentPosition(turn) & Node.DOCUMENT_POSITION_FOLLOWING);
    }""")
    tools.locator("summary").click()
    assert '"name": "act"' in tools.locator("pre").inner_text()
    _shot(page, "tools")
    _open(page, base, "plain")
    page.locator("#list tbody tr").first.click()
    page.wait_for_selector("#detail .turn")
    assert page.locator("#detail details.tools").count() == 0
