"""The core's layout, read from its imports: modules at the top level, rooms, arrows between rooms,
and the names fine-tuning takes from the RL package.

    python bench/core_layout.py [--root CHECKOUT] [--out bench/results/core_layout.json]

A room is a top-level module or a subpackage of ``agentgym_core``; an arrow is "a module of room A
imports a module of room B". Every import statement counts: inside functions, under
``if TYPE_CHECKING``, relative ones, and ``from agentgym_core import X`` (X a module is that module;
X a name the package's ``__init__`` takes from a module is that module). ``import agentgym_core``
alone names no room. ``--root`` reads another checkout (``git archive COMMIT | tar -x -C DIR``) to
compare before and after. Nothing is imported or run: the numbers come from the source alone.

``tests/agentgym_core/test_boundaries.py`` checks the core's rooms with this module's graph, so the
count printed here and the arrows the test allows are one count.
"""

from __future__ import annotations

import argparse
import ast
import json
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "agentgym_core"


def module_paths(package_dir: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package in ``package_dir`` (a package is its ``__init__``)."""
    out = {}
    for path in package_dir.rglob("*.py"):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_statements(path: Path, module: str, *, type_checking: bool = True) -> Iterator[tuple[str, str | None]]:
    """(module named, name taken from it or None) for every import statement of ``path``, relative ones made
    absolute; ``type_checking=False`` leaves out those under ``if TYPE_CHECKING``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if not type_checking and ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")):
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.extend((alias.name, None) for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            source = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            found.extend((source, alias.name) for alias in node.names)

    Visitor().visit(ast.parse(path.read_text()))
    yield from found


def _resolve(source: str, name: str | None, modules: dict[str, Path], face: dict[str, str]) -> str | None:
    """The module of the core an import statement depends on, or None (another package, or the bare package)."""
    if name is not None and f"{source}.{name}" in modules:  # from pkg import submodule
        return f"{source}.{name}"
    if source == PACKAGE:  # from agentgym_core import Env: the module the package's face took it from
        return face.get(name) if name is not None else None
    while source and source not in modules:  # import a.b.c names a.b.c, else its nearest package
        source = source.rpartition(".")[0]
    return source or None


def module_graph(package_dir: Path, *, type_checking: bool = True) -> dict[str, set[str]]:
    """Module -> the other modules of the core it imports."""
    modules = module_paths(package_dir)
    face = {name: source for source, name in import_statements(modules[PACKAGE], PACKAGE)
            if name is not None and source.startswith(f"{PACKAGE}.")}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {_resolve(source, name, modules, face)
                   for source, name in import_statements(path, module, type_checking=type_checking)}
        graph[module] = {t for t in targets if t is not None and t not in (module, PACKAGE)}
    return graph


def room_of(module: str) -> str:
    """``agentgym_core.http.client`` -> ``http``; the package itself (its ``__init__``) is ``agentgym_core``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def room_arrows(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Room -> the other rooms its modules import."""
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = room_of(module)
        rooms.setdefault(source, set()).update(room_of(t) for t in targets if room_of(t) != source)
    return rooms


def measure(root: Path) -> dict:
    package_dir = root / "agentgym_core" / "src" / PACKAGE
    top_level = sorted(p.stem for p in package_dir.glob("*.py") if p.stem not in ("__init__", "__main__"))
    subpackages = sorted(p.name for p in package_dir.iterdir() if (p / "__init__.py").is_file())
    arrows = room_arrows(module_graph(package_dir))
    finetune_from_rl = {f"{source}.{name}" if name else source for module, path in module_paths(package_dir).items()
                        if room_of(module) == "finetune"
                        for source, name in import_statements(path, module)
                        if source.startswith(f"{PACKAGE}.rl")}
    return {
        "top_level_modules": len(top_level),
        "top_level": top_level,
        "subpackages": subpackages,
        "rooms": len(top_level) + len(subpackages),
        "arrows_between_rooms": sum(len(targets) for targets in arrows.values()),
        "arrows": {room: sorted(targets) for room, targets in sorted(arrows.items()) if targets},
        "finetune_names_from_rl": len(finetune_from_rl),
        "finetune_from_rl": sorted(finetune_from_rl),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = {"root": str(args.root), **measure(args.root)}
    for key in ("top_level_modules", "rooms", "arrows_between_rooms", "finetune_names_from_rl"):
        print(f"{key:24s} {result[key]}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
