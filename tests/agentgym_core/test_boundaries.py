"""The core's edges: it imports no plugin, reads no plugin's internals, and has no import cycle.

The import graph is read from the source (every ``import`` statement, also those inside functions,
except under ``if TYPE_CHECKING``), so a lazy import cannot hide a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "agentgym_core" / "src"
PACKAGE = "agentgym_core"
PLUGIN_PREFIXES = ("agentgym_env_", "agentgym_backend_", "agentgym_estimators")


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported_names(path: Path, module: str) -> set[str]:
    """Every module name an import statement of ``path`` names (absolute; relative ones resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            names.update(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)

    Visitor().visit(ast.parse(path.read_text()))
    return names


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of agentgym_core it imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for imported in _imported_names(path, name):
            if imported in modules:
                edges.add(imported)
            elif imported.rpartition(".")[0] in modules:  # `from pkg.mod import function`
                edges.add(imported.rpartition(".")[0])
        # `from agentgym_core import x`: the root package is the import system's, not a dependency
        edges.discard(PACKAGE)
        edges.discard(name)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_module_of_the_core_imports_a_plugin_package():
    offenders = [f"{name} imports {imported}" for name, path in _modules().items()
                 for imported in _imported_names(path, name) if imported.startswith(PLUGIN_PREFIXES)]
    assert not offenders, "the core must reach plugins only through hooks:\n" + "\n".join(offenders)


def test_no_module_of_the_core_reads_a_plugin_s_module_globals():
    offenders = [name for name, path in _modules().items() if "__globals__" in path.read_text()]
    assert not offenders, f"these modules read a function's module globals: {offenders}"


def test_the_core_has_no_import_cycle_between_modules():
    assert _cycles(_graph()) == []


def test_the_core_s_subpackages_do_not_import_each_other_in_a_cycle():
    packages: dict[str, set[str]] = {}
    for module, edges in _graph().items():
        source = _subpackage(module)
        packages.setdefault(source, set()).update(_subpackage(e) for e in edges if _subpackage(e) != source)
    assert _cycles(packages) == []


def test_the_checker_sees_a_cycle_and_a_plugin_import(tmp_path, monkeypatch):
    """The checks above can fail: on a made-up package with a cycle they report it."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from agentgym_env_babyai.env import BabyAIEnv\n")
    assert "agentgym_env_babyai.env" in _imported_names(module, "agentgym_core.m")


def test_run_end_observers_hear_of_a_failed_run(tmp_path):
    """``agentgym_observe_run_end`` is called with the error when the run fails."""
    pytest.importorskip("agentgym_estimators")
    pytest.importorskip("agentgym_backend_transformers")
    from agentgym_core import hookimpl
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.config import load_config
    from agentgym_core.rl.trainer import train
    from agentgym_core.testing.tiny_model import tiny_chat_model

    heard: list[tuple[str, str | None]] = []

    class Observer:
        @hookimpl
        def agentgym_observe_run_end(self, run_dir, metrics, error):
            heard.append((run_dir, error))

    pm = PluginManager(autoload=True, allow=["estimators", "transformers"])
    pm.register(Observer(), "observer-test")
    # An env server that does not exist: the run fails while opening its environments.
    config = load_config(None, [
        "envs=[{name: nowhere, url: 'http://127.0.0.1:9'}]", f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.progress=false", "trainer.tensorboard=false", "trainer.steps=1"])
    model, tokenizer = tiny_chat_model(seed=0)
    with pytest.raises(Exception) as failure:
        train(config, plugin_manager=pm, model=model, tokenizer=tokenizer)
    assert heard == [(str(tmp_path / "run"), f"{type(failure.value).__name__}: {failure.value}")]
