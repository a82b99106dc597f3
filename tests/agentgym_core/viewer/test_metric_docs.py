"""Every metric a run writes is explained in one table (``viewer/metric_docs.py``), which the docs
page "What a run logs" and the viewer's chart tooltips both read."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import pytest

from agentgym_core.viewer.metric_docs import METRICS, describe, lookup, undocumented, undocumented_message

ROOT = Path(__file__).resolve().parents[3]


def written_keys(run_dir: Path) -> dict[str, str]:
    """Every key of the run's ``metrics.jsonl``, with the kind of the first line that wrote it."""
    keys: dict[str, str] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key in record:
            keys.setdefault(key, record.get("kind", "train"))
    return keys


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    """A real 3-step GRPO run with an evaluation after every step (tiny model, WordEnv over HTTP)."""
    pytest.importorskip("agentgym_estimators")
    pytest.importorskip("agentgym_backend_transformers")
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "agentgym_core" / "rl"))  # word_env: the trainer tests' env
    from viewer_runs import _train

    run = tmp_path_factory.mktemp("metrics") / "train"
    try:
        _train(run, seed=0)
    finally:
        monkeypatch.undo()
    return run


def test_every_metric_a_short_run_writes_is_documented(short_run):
    keys = written_keys(short_run)
    assert {"success", "clip_frac", "approx_kl", "sampler_kl", "rollout_logprob_gap", "staleness_mean",
            "pool/word/s0/errors", "word/success", "tasks"} <= set(keys)  # the run reached the metrics it should
    missing = undocumented(keys)
    lines = ", ".join(f"{k}: a {keys[k]} line" for k in missing)
    assert not missing, undocumented_message(keys, f"a short training run ({lines})")


def test_the_first_training_line_names_the_attention_kernel(short_run):
    # Issue 46: a run's metrics say which kernel sampled them (the tiny model on a CPU: sdpa), once.
    lines = [json.loads(line) for line in (short_run / "metrics.jsonl").read_text().splitlines()]
    train = [line for line in lines if line["kind"] == "train"]
    assert train[0]["rollout/attention_kernel"] == "sdpa"
    assert train[0]["rollout/decode_engine"] in ("own", "library") and train[0]["rollout/device"] == "cpu"
    assert not any("rollout/attention_kernel" in line for line in lines if line is not train[0])


def test_a_new_metric_without_an_entry_is_named():
    keys = ["step", "kind", "success", "word/success", "pool/word/s3/errors", "peak_rss_update_gb",
            "curriculum/babyai/expected_mixed", "my_new_rate", "word/my_new_rate"]
    assert undocumented(keys) == ["my_new_rate", "word/my_new_rate"]
    message = undocumented_message(keys, "a test run")
    assert "my_new_rate, word/my_new_rate" in message and "viewer/metric_docs.py" in message
    assert lookup("pool/word/s3/errors").name == "pool/<env>/<server>/errors"
    assert describe("word/success").startswith("word only: Share of the step's trajectories")


def test_every_entry_says_what_it_measures_and_names_are_unique():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for m in METRICS:
        assert m.meaning.endswith(".") and m.writer in {"trainer", "evaluation", "both", "server", "fine-tuning"}, m


def test_the_docs_page_is_generated_from_the_table():
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    docs_reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs_reference)
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    assert "<!-- reference: metrics -->" in page
    text = docs_reference.metrics()
    for m in METRICS:
        assert f"| `{m.name}`" in text, m.name
    # The viewer's sections, in the viewer's order, each under its own heading.
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings[:4] == ["Outcomes and losses", "The update", "Rollouts", "Optimizer"]  # layout.SECTION_ORDER
    assert "`clip_frac` | Share of sampled tokens" in text.split("## The update")[1].split("## ")[0]


def test_the_viewer_serves_the_same_text_as_tooltips(serve_viewer, short_run):
    base = serve_viewer(short_run.parent)
    overview = httpx.get(f"{base}/api/run", params={"run": "train"}).json()
    help_ = overview["help"]
    for key in ("clip_frac", "sampler_kl", "word/success", "pool/word/s0/errors"):
        assert help_[key] == describe(key)
    charted = {k for kind in overview["metrics"].values() for k in kind} - {"step"}
    assert charted and set(help_) == charted  # every chart has its text


@pytest.mark.browser
def test_a_chart_title_carries_its_metric_help(page, serve_viewer, short_run):
    base = serve_viewer(short_run.parent)
    page.goto(f"{base}/#run=train")
    page.wait_for_selector("body[data-ready='1']")
    title = page.locator(".chart[data-metric=clip_frac] .title").get_attribute("title")
    assert title == "clip_frac: " + describe("clip_frac")
    assert "Near 1: the policy moved far" in title
