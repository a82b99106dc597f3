"""The core's layout, read from its imports: modules at the top level, rooms, arrows between rooms,
and the names fine-tuning takes from the RL package.

    python bench/core_layout.py [--root CHECKOUT] [--out bench/results/core_layout.json]

A room is a top-level module or a subpackage of ``agentgym_core``; an arrow is "a module of room A
imports a module of room B" (imports inside functions and under ``if TYPE_CHECKING`` count).
``--root`` reads another checkout (e.g. a worktree of an older commit) to compare before and after.
Nothing is imported or run: the numbers come from the source alone.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path


def _module_name(path: Path, package_root: Path) -> str:
    parts = path.relative_to(package_root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> list[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for every import statement of ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            out += [(source, alias.name) for alias in node.names]
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def measure(root: Path) -> dict:
    package_root = root / "agentgym_core" / "src" / "agentgym_core"
    top_level = sorted(p.stem for p in package_root.glob("*.py") if p.stem not in ("__init__", "__main__"))
    subpackages = sorted(p.name for p in package_root.iterdir() if (p / "__init__.py").is_file())
    arrows: set[tuple[str, str]] = set()
    finetune_from_rl: set[str] = set()
    for path in package_root.rglob("*.py"):
        module = _module_name(path, package_root)
        for imported, name in _imports(path, module):
            if not imported.startswith("agentgym_core."):
                continue
            source, target = _room(module), _room(imported)
            if source != target and target in set(top_level) | set(subpackages):
                arrows.add((source, target))
            if source == "finetune" and target == "rl":
                finetune_from_rl.add(f"{imported}.{name}")
    return {
        "top_level_modules": len(top_level),
        "top_level": top_level,
        "subpackages": subpackages,
        "rooms": len(top_level) + len(subpackages),
        "arrows_between_rooms": len(arrows),
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
