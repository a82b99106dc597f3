"""The docs site builds strictly, and its generated reference covers every recipe key with help text.

The reference pages are filled at build time by scripts/docs_reference.py (an MkDocs hook) from the
pydantic config models, the argparse parsers, the server's OpenAPI description and hookspecs.py.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

ROOT = Path(__file__).resolve().parents[1]


def load_generator():
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs_reference = load_generator()


def test_every_recipe_key_has_help_text():
    from agentgym_core.finetune.config import CollectConfig, FinetuneConfig
    from agentgym_core.rl.config import TrainConfig

    for model in (TrainConfig, FinetuneConfig, CollectConfig):
        missing = docs_reference.keys_without_help(model)
        assert not missing, f"{model.__name__}: keys without a Field(description=...): {missing}"


def test_a_key_without_help_fails_the_reference():
    class Inner(BaseModel):
        documented: int = Field(1, description="Has help.")
        bare: int = 2

    class Recipe(BaseModel):
        """A recipe."""

        inner: Inner = Field(default_factory=Inner, description="A section.")

    assert docs_reference.keys_without_help(Recipe) == ["inner.bare"]
    with pytest.raises(docs_reference.MissingHelp, match="inner.bare"):
        docs_reference.section_tables(Recipe, "test recipe")


def test_the_recipe_reference_lists_every_key():
    from agentgym_core.rl.config import TrainConfig

    text = docs_reference.recipe_rl()
    for key, info, _ in docs_reference.walk_keys(TrainConfig):
        assert f"| `{key}` |" in text, key
        assert docs_reference.cell(info.description) in text, key


def test_the_plugin_options_reference_lists_what_every_installed_plugin_declares(monkeypatch):
    """Read from the plugin record (``register(..., options=...)``), as the recipe loader reads it."""
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.estimator_api import AdvantageConfig
    from agentgym_core.schedulers import RoundsConfig

    monkeypatch.delenv("AGENTGYM_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    text = docs_reference.plugin_options()
    manager = PluginManager(autoload=True)
    sections = {"advantage_estimator": ("algorithm.advantage", set(AdvantageConfig.model_fields)),
                "round_scheduler": ("algorithm.rounds_ctrl", set(RoundsConfig.model_fields)),
                "rollout_backend": ("rollout.backend_options", {"model"})}
    checked = 0
    for kind, (section, core_keys) in sections.items():
        for name, registration in manager.catalog(kind).items():
            options = registration.declared("options")
            for key, info in (options.model_fields.items() if options is not None else ()):
                if key not in core_keys:
                    assert f"| `{section}.{key}` |" in text, (name, key)
                    assert docs_reference.cell(info.description) in text, (name, key)
                    checked += 1
    assert checked > 0
    pytest.importorskip("agentgym_env_guess")  # the example package's scheduler adds two keys
    assert "| `algorithm.rounds_ctrl.warmup_steps` |" in text and "| `algorithm.rounds_ctrl.warmup_rounds` |" in text
    if "vllm" in manager.catalog("rollout_backend"):
        assert "| `rollout.backend_options.gpu_sharing` |" in text


def test_the_cli_reference_has_every_command_and_option():
    from agentgym_core.cli import build_parser

    text = docs_reference.cli()
    subparsers = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, parser in subparsers.choices.items():
        assert f"## `agentgym {name}`" in text
        for action in parser._actions:
            if action.__class__.__name__ == "_HelpAction":
                continue
            for flag in action.option_strings:
                assert f"`{flag}" in text or f", {flag}" in text, f"agentgym {name} {flag}"


def test_the_http_reference_has_every_route_of_the_server():
    text = docs_reference.http()
    for route in (
        "POST /v1/instances",
        "POST /v1/step_batch",
        "GET /v1/health",
        "DELETE /v1/instances/{instance_id}",
        "POST /v1/parse_action",
    ):
        assert re.search(rf"`{re.escape(route)}`", text) or route.split(" {")[0] in text, route
    assert "#### ErrorResponse" in text


def test_the_hook_reference_has_every_hook_with_its_docstring():
    from agentgym_core import hookspecs

    text = docs_reference.hooks()
    for name in [*hookspecs.CATALOG_HOOKS.values(), *hookspecs.OBSERVER_HOOKS]:
        assert f"### `{name}`" in text
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    assert "``" not in prose and ":class:" not in prose  # reST turned into Markdown


def test_every_docs_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert pages
    missing = [p for p in pages if f": {p}" not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


GLOSSARY_TERMS = ("anchor", "horizon")
"""Words used in a sense of their own: each page links its first use to its entry in concepts/glossary.md."""


def test_a_page_links_a_glossary_term_where_it_first_uses_it():
    glossary = (ROOT / "docs" / "concepts" / "glossary.md").read_text()
    for term in GLOSSARY_TERMS:
        assert f"\n## {term}\n" in glossary, f"concepts/glossary.md has no entry '## {term}'"
    unlinked = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if page.name == "glossary.md":
            continue
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        text = "\n".join(line for line in text.splitlines() if not line.startswith("#"))  # titles are not prose
        for term in GLOSSARY_TERMS:
            for use in re.finditer(rf"\[([^\]]*)\]\(([^)]*)\)|\b{term}\b", text, re.I):  # a link, or the bare word
                if use.group(1) is not None and not re.search(rf"\b{term}\b", use.group(1), re.I):
                    continue  # a link about something else
                if not (use.group(2) or "").endswith(f"glossary.md#{term}"):
                    unlinked.append(f"{page.relative_to(ROOT)}: '{use.group(0)}'")
                break
    assert not unlinked, f"first uses not linked to concepts/glossary.md: {unlinked}"


def test_recipe_comments_point_to_docs_pages_that_exist():
    """The README is a door: a recipe's comment sends a reader to the page that explains, and that page exists."""
    stale, missing = [], []
    for recipe in sorted((ROOT / "examples").glob("*.yaml")):
        for number, line in enumerate(recipe.read_text().splitlines(), 1):
            comment = line.partition("#")[2]
            if re.search(r"(?<![\w/.])README\b(?!\.md)", comment):
                stale.append(f"{recipe.name}:{number}")
            missing += [f"{recipe.name}:{number}: {path}" for path in re.findall(r"\b((?:docs|bench)/[\w./-]+\.md)", comment)
                        if not (ROOT / path).exists()]
    assert not stale, f"comments that point to the README, whose sections moved to docs/: {stale}"
    assert not missing, f"comments that name pages that do not exist: {missing}"


RUNNABLE_HOW_TOS = ("observer.md", "scheduler.md", "backend.md", "your-own-env.md")


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_HOW_TOS)
def test_a_how_to_s_example_runs_and_prints_what_it_says(page, tmp_path):
    """The first Python block of the page runs as it is, and prints the lines its trailing comments show."""
    text = (ROOT / "docs" / "how-to" / page).read_text()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    lines = block.rstrip().splitlines()
    trailing = len(lines) - next(i for i in range(len(lines) - 1, -1, -1) if not lines[i].startswith("# ")) - 1
    expected = [line[2:] for line in lines[len(lines) - trailing:]]
    assert expected, f"{page}: its example shows no output in trailing '# ...' comments"
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-len(expected):] == expected


def test_the_readme_is_a_door():
    text = (ROOT / "README.md").read_text()
    assert 120 <= len(text.splitlines()) <= 250
    for link in re.findall(r"\]\(((?:docs|bench)/[^)#]+)", text):
        assert (ROOT / link).exists(), f"README.md links to {link}, which does not exist"
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        compile(block, "README.md", "exec")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once by `mkdocs build --strict`; a broken link, anchor or reference marker fails it."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs-material is not installed (it is in the dev extra: scripts/install.sh --dev)")
    tmp = tmp_path_factory.mktemp("docs")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or "mkdocs"
    result = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent), "HOME": str(tmp)},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return tmp / "site"


@pytest.mark.slow
def test_the_site_builds_strictly(site):
    recipe = (site / "reference" / "recipe" / "index.html").read_text()
    assert "algorithm.rounds_ctrl.steps_scaling_inter" in recipe
    assert "<!-- reference:" not in recipe


def search_hits(index: dict, query: str, separator: str | None = None) -> list[str]:
    """Locations of the search index's sections holding every word of ``query``, both split as the
    site's search splits them (its ``separator``), so a key is found only if the reader's search finds it."""
    split = re.compile(separator or index["config"]["separator"])

    def words(text: str) -> set[str]:
        text = re.sub(r"<[^>]+>", " ", text)
        return {w.lower() for w in split.split(text) if w}

    wanted = words(query)
    return [doc["location"] for doc in index["docs"] if wanted <= words(doc["title"] + " " + doc["text"])]


@pytest.mark.slow
@pytest.mark.parametrize("query", ["max_new_tokens", "kl.coef", "invalid_action_penalty", "algorithm.kl.coef"])
def test_search_finds_a_recipe_key_by_part_of_its_name(site, query):
    index = json.loads((site / "search" / "search_index.json").read_text())
    hits = search_hits(index, query)
    assert any(hit.startswith("reference/recipe/") for hit in hits), (
        f"searching {query!r} does not reach the recipe reference; hits: {hits[:5]} "
        f"(plugins.search.separator in mkdocs.yml decides where words split)"
    )
    if query != "algorithm.kl.coef":  # the theme's default separator, spaces and dashes, keeps a dotted key whole
        assert not any(hit.startswith("reference/recipe/") for hit in search_hits(index, query, r"[\s\-]+"))


@pytest.mark.slow
def test_the_404_page_links_under_the_site_url(site):
    """The 404 page is served at any depth, so its links are absolute: under site_url's path, not the host's root."""
    from urllib.parse import urlparse

    import yaml

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # BaseLoader: skips !!python tags
    base = urlparse(config.get("site_url", "")).path
    assert base.strip("/"), "mkdocs.yml has no site_url with a path, so the 404 page links to the host's root"
    links = re.findall(r'(?:href|src)="(/[^/"][^"]*)"', (site / "404.html").read_text())
    assert links and all(link.startswith(base) for link in links), [x for x in links if not x.startswith(base)]
