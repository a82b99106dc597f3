"""The core's edges and rooms: it imports no plugin, has no import cycle, and its rooms import only
the rooms the table below allows.

The import graph is read from the source by ``bench/core_layout.py`` (every ``import`` statement, also
those inside functions, relative ones and ``from agentgym_core import X``), so a lazy import cannot hide a
dependency and the arrows allowed here are the arrows bench/README.md counts; the checks of cycles and rooms also read the imports
under ``if TYPE_CHECKING``, because a type-only circle is still a circle a reader has to untangle.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SRC = Path(__file__).resolve().parents[2] / "agentgym_core" / "src"
PACKAGE = "agentgym_core"
PLUGIN_PREFIXES = ("agentgym_env_", "agentgym_backend_", "agentgym_estimators")


def _load_layout() -> ModuleType:
    spec = importlib.util.spec_from_file_location("core_layout", SRC.parents[1] / "bench" / "core_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The import graph and its rooms come from bench/core_layout.py, so the arrows this file allows and the count
# bench/README.md quotes are one count.
layout = _load_layout()


def _modules() -> dict[str, Path]:
    return layout.module_paths(SRC / PACKAGE)


def _graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of agentgym_core it imports; ``type_only``: also those under ``if TYPE_CHECKING``."""
    return layout.module_graph(SRC / PACKAGE, type_checking=type_only)


def _imported_names(path: Path, module: str, *, type_only: bool = False) -> set[str]:
    """What the import statements of ``path`` name: each module, and ``module.name`` for ``from module import name``."""
    return {f"{source}.{name}" if name else source
            for source, name in layout.import_statements(path, module, type_checking=type_only)} | {
        source for source, _ in layout.import_statements(path, module, type_checking=type_only)}


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


# The rooms of the core (a top-level module or a subpackage) and the rooms each may import. The base
# (env, hookspecs, plugins and the small leaf modules) imports nothing above it; the two servers
# stand on the env interface and the rollout contract; rl and finetune stand on the servers'
# clients, the rollout engine and the training kit; commands, the CLI's room, may use any room.
# A new arrow is a design decision: add it here, with the reason if it is not obvious.
ALLOWED: dict[str, set[str]] = {
    "agentgym_core": {"env", "hookspecs", "plugins"},  # the package's face: Env, hookimpl, the manager
    "__main__": {"cli"},
    "cli": {"commands"},  # setup-error types and their one-line report live in commands._report
    # the plugin manager lists what each plugin registers, and the pipeline checks model.path before any phase
    "commands": {"env", "evaluation", "finetune", "http", "model_server", "pipeline", "plugins", "recipes", "rl",
                 "rollout", "viewer"},
    "env": set(),
    "hookspecs": set(),
    "plugins": {"hookspecs"},
    "builtin": {"hookspecs", "schedulers"},
    "experts": set(),
    "finetune_options": set(),
    "recipes": set(),  # the recipe loader rl and finetune share (from the recipe-schema work)
    "models": set(),
    "schedulers": set(),
    "http": {"env", "plugins"},  # plugins: the workers and http.opening make an environment from its name
    "model_server": {"http", "plugins", "rollout"},  # http: auth, one reading of the Authorization header for every server
    "rollout": {"env", "schedulers"},
    "text_gym": {"env"},  # serving any Env class from a script is http.serving.serve_forever
    "viewer": set(),
    "testing": {"env", "http", "rollout"},
    "training": set(),  # the kit rl and finetune share: it knows neither
    # rl.distributed installs testing's strict collectives when a test run asks for them by env var
    "rl": {"evaluation", "finetune_options", "http", "models", "plugins", "recipes", "rollout", "schedulers",
           "testing", "training"},
    # the one evaluator (agentgym eval and the trainer's held-out evaluations): it knows nothing of training
    "evaluation": {"env", "http", "plugins", "rollout"},
    "finetune": {"env", "experts", "finetune_options", "http", "models", "plugins", "recipes", "rl", "rollout",
                 "training"},
    # where rl and finetune meet (warm start, then RL); the warm start hands back its model fine-tuned
    # and the memory SFT freed, so the pipeline needs nothing of the training kit
    "pipeline": {"finetune", "plugins", "rl"},
    # our envs for other trainers (TRL's environment_factory), opened by name, class or URL with http.opening
    "integrations": {"env", "http"},
}

# Issue 47: the core's rooms draw no more arrows than at commit 9be0b11 (61, counted by bench/core_layout.py).
MAX_ARROWS_BETWEEN_ROOMS = 61

# The core's top level holds rooms, not loose files: at most this many modules beside the
# subpackages (``__init__`` and ``__main__`` not counted).
MAX_TOP_LEVEL_MODULES = 12

# Import circles known today and why they still stand; a new circle fails. None stands: rl.config reads
# the packing version gate from rl.packing_support, which imports nothing of rl.
KNOWN_CYCLES: list[list[str]] = []


def _room_arrows(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return layout.room_arrows(graph)


def _forbidden_arrows(rooms: dict[str, set[str]], allowed: dict[str, set[str]]) -> list[str]:
    out = []
    for room, targets in sorted(rooms.items()):
        if room not in allowed:
            out.append(f"{room}: a new room; add it to ALLOWED with the rooms it may import: {sorted(targets)}")
            continue
        out += [f"{room} -> {target}" for target in sorted(targets - allowed[room])]
    return out


def test_no_module_cycle_even_through_type_only_imports():
    new = [cycle for cycle in _cycles(_graph(type_only=True)) if cycle not in KNOWN_CYCLES]
    assert new == [], f"import circles (type-only imports included): {new}"


def test_each_room_of_the_core_imports_only_the_rooms_it_may():
    forbidden = _forbidden_arrows(_room_arrows(_graph(type_only=True)), ALLOWED)
    assert forbidden == [], ("arrows the room table of tests/agentgym_core/test_boundaries.py does not allow "
                             "(import from an allowed room, or add the arrow to ALLOWED with its reason):\n"
                             + "\n".join(forbidden))


def test_the_core_s_top_level_holds_rooms_not_loose_files():
    loose = sorted(p.stem for p in (SRC / PACKAGE).glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(loose) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(loose)} modules at the core's top level (at most {MAX_TOP_LEVEL_MODULES}): {loose}; "
        "put a new module in the subpackage whose job it shares")


def test_importing_the_core_installs_no_import_hook():
    """Modules that moved into a room are imported from the room: the old top-level paths are gone, and no
    finder answers for them (``agentgym_core.client`` was ``agentgym_core.http.client``)."""
    import importlib
    import subprocess
    import sys

    probe = ("import sys; before = list(sys.meta_path); import agentgym_core; "
             "assert sys.meta_path == before, sys.meta_path")
    subprocess.run([sys.executable, "-c", probe], check=True)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("agentgym_core.client")
    assert importlib.import_module("agentgym_core.http.client").HTTPEnv


def _exported_but_not_defined(source: str) -> list[str]:
    """The names of a module's ``__all__`` that the module imports instead of defining (a re-export)."""
    tree = ast.parse(source)
    defined: set[str] = set()
    exported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(node.value, ast.List):
                    exported = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                defined.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return [name for name in exported if name not in defined]


def test_rl_s_modules_export_only_what_they_define():
    """An importer names the module that owns a name: ``rl.config``, ``rl.guards`` and ``rl.forward`` once passed
    on the recipe loader's, the evaluation panel's and the critic's names, and two paths to one name drift."""
    offenders = {name: reexported for name, path in _modules().items()
                 if name.startswith(f"{PACKAGE}.rl.") and path.name != "__init__.py"
                 and (reexported := _exported_but_not_defined(path.read_text()))}
    assert offenders == {}, f"import these from the module that defines them: {offenders}"
    assert _exported_but_not_defined("from a import b\nc = 1\n__all__ = ['b', 'c']\n") == ["b"]


def test_no_module_of_the_core_imports_a_plugin_package():
    offenders = [f"{name} imports {imported}" for name, path in _modules().items()
                 for imported in _imported_names(path, name) if imported.startswith(PLUGIN_PREFIXES)]
    assert not offenders, "the core must reach plugins only through hooks:\n" + "\n".join(offenders)


def _plugin_names() -> set[str]:
    """Every name a plugin package of this checkout registers (``register("name", ...)`` in its plugin module)."""
    root = SRC.parents[1]
    names = set()
    for path in [*root.glob("plugins/*/src/*/plugin.py"), *root.glob("agentgym_env_*/src/*/plugin.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names.add(node.args[0].value)
    return names


def _name_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every comparison (``==``, ``!=``, ``in``, ``match``) of a value with a string in ``names``."""

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [s for element in node.elts for s in strings(element)]
        if isinstance(node, ast.MatchValue):
            return strings(node.value)
        if isinstance(node, ast.MatchOr):
            return [s for pattern in node.patterns for s in strings(pattern)]
        return []

    found = []
    for node in ast.walk(ast.parse(source)):
        operands = [node.left, *node.comparators] if isinstance(node, ast.Compare) else \
            [case.pattern for case in node.cases] if isinstance(node, ast.Match) else []
        found += [(node.lineno, s) for operand in operands for s in strings(operand) if s in names]
    return sorted(found)


def test_the_core_decides_nothing_by_a_plugin_s_name():
    """Defaults follow what a plugin declares (capabilities, options, critic=...), so a third-party plugin that
    declares the same gets the same; a comparison with one of our plugins' names would favour ours."""
    names = _plugin_names()
    assert {"transformers", "vllm", "gae", "grpo", "babyai"} <= names  # the scan sees the plugins
    offenders = [f"{module}:{line} compares with the plugin name {name!r}" for module, path in _modules().items()
                 for line, name in _name_comparisons(path.read_text(), names)]
    assert offenders == [], "decide by what the plugin declares instead:\n" + "\n".join(offenders)


def test_the_name_check_sees_comparisons_in_every_form():
    source = ("a = backend == 'vllm'\nb = 'gae' != estimator\nc = name in ('x', 'grpo')\n"
              "match kind:\n    case 'babyai' | 'y':\n        pass\nd = mode == 'server'\n")
    assert _name_comparisons(source, {"vllm", "gae", "grpo", "babyai"}) == [
        (1, "vllm"), (2, "gae"), (3, "grpo"), (4, "babyai")]


def test_no_module_of_the_core_reads_a_plugin_s_module_globals():
    offenders = [name for name, path in _modules().items() if "__globals__" in path.read_text()]
    assert not offenders, f"these modules read a function's module globals: {offenders}"


def test_the_core_has_no_import_cycle_between_modules():
    assert _cycles(_graph()) == []


def test_the_core_s_rooms_do_not_import_each_other_in_a_cycle():
    assert _cycles(_room_arrows(_graph(type_only=True))) == []


def test_the_checker_sees_a_cycle_and_a_plugin_import(tmp_path, monkeypatch):
    """The checks above can fail: on a made-up package with a cycle they report it."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _forbidden_arrows({"http": {"env", "rl"}, "new": {"env"}}, {"http": {"env"}}) == [
        "http -> rl", "new: a new room; add it to ALLOWED with the rooms it may import: ['env']"]
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from agentgym_env_babyai.env import BabyAIEnv\n"
                      "if TYPE_CHECKING:\n    from agentgym_core.rl import config\n")
    assert "agentgym_env_babyai.env" in _imported_names(module, "agentgym_core.m")
    assert "agentgym_core.rl.config" not in _imported_names(module, "agentgym_core.m")
    assert "agentgym_core.rl.config" in _imported_names(module, "agentgym_core.m", type_only=True)


def test_the_graph_sees_every_form_of_import_between_rooms(tmp_path):
    """``from agentgym_core import commands``, a name the package's face passes on, a relative import and an
    import inside a function are each an arrow (bench/core_layout.py once missed the first and counted 62 for 64)."""
    package = tmp_path / PACKAGE
    for room in ("a", "b", "c", "d", "e"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from agentgym_core.e.thing import Thing\n")
    (package / "e" / "thing.py").write_text("class Thing: ...\n")
    (package / "a" / "m.py").write_text("from agentgym_core import b\nfrom agentgym_core import Thing\n"
                                        "from ..c import x\ndef f():\n    import agentgym_core.d.y\n"
                                        "import agentgym_core\n")
    arrows = layout.room_arrows(layout.module_graph(package))
    assert arrows["a"] == {"b", "c", "d", "e"}
    assert arrows[PACKAGE] == {"e"}


def test_the_room_table_is_the_measured_layout_and_holds_no_more_arrows_than_issue_47_allows():
    """ALLOWED lists exactly the arrows drawn (a stale entry would let an arrow come back unseen), and their number is
    the one bench/README.md quotes: at most the 61 arrows of commit 9be0b11, issue 47's baseline."""
    drawn = {room: targets for room, targets in _room_arrows(_graph(type_only=True)).items() if targets}
    assert drawn == {room: targets for room, targets in ALLOWED.items() if targets}
    count = layout.measure(SRC.parents[1])["arrows_between_rooms"]
    assert count == sum(len(targets) for targets in ALLOWED.values()) <= MAX_ARROWS_BETWEEN_ROOMS


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
