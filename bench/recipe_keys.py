"""How many keys a recipe shows a reader: leaf keys of the RL schema by section, and of one recipe.

    python bench/recipe_keys.py [--recipe examples/babyai_grpo_cpu.yaml] [--out bench/results/recipe_keys.json]

Counts the leaf keys of ``TrainConfig`` (``envs`` once, ``warm_start`` included), grouped by the
section a reader finds them in (``trainer.ray`` and ``runtime`` apart), the leaf keys of the recipe's
effective config (defaults filled in) and the leaf keys the recipe file states itself. Run it with
another checkout's sources first on PYTHONPATH to count an older schema.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from agentgym_core.rl.config import TrainConfig, load_config

try:
    from agentgym_core.recipes import _model_of
except ImportError:  # a checkout from before the one recipe loader
    from agentgym_core.rl.config import _model_of


def schema_keys(model: Any, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for name, field in model.model_fields.items():
        sub = _model_of(field.annotation)
        keys += schema_keys(sub, f"{prefix}{name}.") if sub is not None else [prefix + name]
    return keys


def leaves(value: Any) -> int:
    if isinstance(value, dict):
        return sum(leaves(v) for v in value.values()) if value else 1
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return sum(leaves(v) for v in value)
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="examples/babyai_grpo_cpu.yaml")
    parser.add_argument("--out", default="bench/results/recipe_keys.json")
    args = parser.parse_args()
    keys = schema_keys(TrainConfig)
    sections: dict[str, int] = {}
    for key in keys:
        section = "trainer.ray" if key.startswith("trainer.ray.") else key.split(".")[0]
        sections[section] = sections.get(section, 0) + 1
    result = {
        "schema_keys": len(keys), "by_section": sections,
        "first_look_keys": sum(n for s, n in sections.items() if s not in ("trainer.ray", "runtime")),
        "recipe": args.recipe,
        "recipe_effective_keys": leaves(load_config(args.recipe).model_dump(mode="json")),
        "recipe_stated_keys": leaves(yaml.safe_load(Path(args.recipe).read_text())),
    }
    print(json.dumps(result, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
