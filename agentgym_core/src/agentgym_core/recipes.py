"""Reading a YAML recipe: the one loader of RL and fine-tuning recipes.

    config = load_recipe(TrainConfig, "examples/babyai_grpo_cpu.yaml", ["trainer.steps=5"])

A recipe is read (:func:`read_recipe`), keys from an older layout are moved to their place
(:data:`MOVED_KEYS`, with a one-line deprecation warning each, until :data:`MOVED_KEYS_REMOVED_IN`; from
that version on the old place is an error naming the new one), ``a.b=value`` overrides are applied,
unknown keys are refused naming the closest valid one, and the schema validates the rest. Every
failure is a :class:`ConfigError` whose message says what was wrong and how to fix it.

This module imports neither torch nor the training code, so a bad recipe is reported at once.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import re
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

__all__ = [
    "MOVED_KEYS",
    "MOVED_KEYS_REMOVED_IN",
    "RECIPE_KINDS",
    "ConfigError",
    "apply_overrides",
    "check_keys",
    "first_sentence",
    "load_recipe",
    "move_old_keys",
    "read_recipe",
    "recipe_kind",
    "save_recipe",
    "show_config",
    "validation_message",
]

log = logging.getLogger(__name__)

Config = TypeVar("Config", bound=BaseModel)

# Keys that moved to a section a user opens only when needed: old dotted path -> new dotted path.
# Ray-only keys went to trainer.ray, process and memory knobs to runtime.
MOVED_KEYS: dict[str, str] = {
    "trainer.ray_address": "trainer.ray.address",
    "trainer.rollout_workers": "trainer.ray.rollout_workers",
    "trainer.learner_resources": "trainer.ray.learner_resources",
    "trainer.rollout_resources": "trainer.ray.rollout_resources",
    "trainer.placement_timeout_s": "trainer.ray.placement_timeout_s",
    "trainer.remote_timeout_s": "trainer.ray.remote_timeout_s",
    "trainer.rollout_worker_restarts": "trainer.ray.rollout_worker_restarts",
    "model.threads": "runtime.threads",
    "model.onednn_primitive_cache": "runtime.onednn_primitive_cache",
    "model.heap_trim_interval_s": "runtime.heap_trim_interval_s",
    "model.autocast_cache": "runtime.autocast_cache",
    "trainer.optimizer_state_to_disk": "runtime.optimizer_state_to_disk",
}

MOVED_KEYS_REMOVED_IN = "0.2.0"
"""The agentgym-core version from which a key of :data:`MOVED_KEYS` at its old place is an error, not a warning."""


def _version_tuple(version: str) -> tuple[int, ...]:
    """``"0.2.0"`` -> ``(0, 2, 0)``; a pre-release or local suffix (``0.2.0.dev1``, ``0.2.0+g1234``) counts as that
    release."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def _moved(old: str, new: str, where: str) -> None:
    """Warn that ``old`` moved to ``new`` and until when it works; from :data:`MOVED_KEYS_REMOVED_IN` on, refuse it."""
    installed = importlib.metadata.version("agentgym-core")
    if _version_tuple(installed) >= _version_tuple(MOVED_KEYS_REMOVED_IN):
        raise ConfigError(f"{where}: {old} is no longer read (removed in agentgym-core {MOVED_KEYS_REMOVED_IN}); "
                          f"write it as {new}")
    log.warning("%s: %s has moved to %s; the old place works until agentgym-core %s", where, old, new,
                MOVED_KEYS_REMOVED_IN)


class ConfigError(ValueError):
    """The configuration is invalid; the message says which key and how to fix it."""


def read_recipe(path: str | Path) -> dict[str, Any]:
    """The mapping in the YAML recipe ``path``; a one-line ConfigError naming the file (and line) if unreadable."""
    path = Path(path)
    if path.is_dir():
        hint = f"; to continue that run: --resume {path}" if (path / "config.yaml").is_file() else ""
        raise ConfigError(f"{path} is a directory; pass a YAML recipe file, e.g. examples/babyai_grpo_cpu.yaml{hint}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist; see examples/*.yaml for recipes") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the recipe {path}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"{where}: not valid YAML ({problem}); fix that line of the recipe") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a YAML mapping of sections (model:, envs:, ...), "
                          f"got a {type(data).__name__}")
    return data


RECIPE_KINDS = ("rl", "sft", "dpo", "rejection_sampling")


def recipe_kind(path: str | Path | None, overrides: list[str] | None = None) -> str:
    """The recipe's top-level ``kind`` (``rl`` when absent): which trainer runs it.

    ``rl`` recipes are ``agentgym_core.rl.config.TrainConfig``; the others are
    ``agentgym_core.finetune.config.FinetuneConfig``. A ``kind=...`` override wins over the file.
    """
    kind = "rl"
    if path is not None:
        kind = str(read_recipe(path).get("kind", "rl"))
    for override in overrides or []:
        if override.startswith("kind="):
            kind = override.split("=", 1)[1].strip()
    if kind not in RECIPE_KINDS:
        raise ConfigError(f"unknown recipe kind {kind!r}; expected one of {', '.join(RECIPE_KINDS)}")
    return kind


def move_old_keys(data: dict[str, Any], where: str = "the recipe") -> dict[str, Any]:
    """Move every key of :data:`MOVED_KEYS` found at its old place in ``data`` to its new one, warning once each.

    A key given at both places is a :class:`ConfigError` (which one was meant is unknowable).
    """
    for old, new in MOVED_KEYS.items():
        old_parent, old_key = _parent(data, old, create=False)
        if old_parent is None or old_key not in old_parent:
            continue
        new_parent, new_key = _parent(data, new, create=True)
        if new_key in new_parent:
            raise ConfigError(f"{where} sets both {old} (the old place) and {new}; keep only {new}")
        _moved(old, new, where)
        new_parent[new_key] = old_parent.pop(old_key)
    return data


def _parent(data: dict[str, Any], dotted: str, *, create: bool) -> tuple[Any, str]:
    """The mapping that holds the last part of ``dotted`` (created on the way when ``create``), and that part."""
    *sections, key = dotted.split(".")
    node: Any = data
    for section in sections:
        if not isinstance(node, dict):
            return None, key
        if section not in node and create:
            node[section] = {}
        node = node.get(section)
    return (node if isinstance(node, dict) else None), key


def _moved_override(dotted: str) -> str:
    """An override's dotted key with a moved key's old place replaced by its new one (warning once)."""
    for old, new in MOVED_KEYS.items():
        if dotted == old or dotted.startswith(old + "."):
            _moved(old, new, "override")
            return new + dotted[len(old):]
    return dotted


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML: numbers, lists, bools); ``envs.0.url=...`` indexes lists."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} has no '='; write it as section.key=value, e.g. trainer.steps=10")
        dotted, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw.strip() else ""
        node: Any = data
        parts = _moved_override(dotted.strip()).split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return data


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model class inside an annotation like ``X``, ``X | None`` or ``list[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def check_keys(model: type[BaseModel], data: Any, where: str = "") -> None:
    """Raise ConfigError for the first unknown key, naming the closest valid one."""
    if not isinstance(data, dict) or model.model_config.get("extra") == "allow":
        return  # a plugin's options (algorithm.advantage, rounds_ctrl): checked by rl.plugin_options
    fields = model.model_fields
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.5)
            hint = f" Did you mean '{(where + '.') if where else ''}{close[0]}'?" if close else ""
            valid = ", ".join(sorted(fields))
            raise ConfigError(f"unknown config key '{path}'.{hint} Valid keys here: {valid}.")
        sub = _model_of(fields[key].annotation)
        if sub is None:
            continue
        if get_origin(fields[key].annotation) is list and isinstance(value, list):
            for i, item in enumerate(value):
                check_keys(sub, item, f"{path}[{i}]")
        else:
            check_keys(sub, value, path)


def validation_message(exc: ValidationError) -> str:
    """A pydantic error as one line: every bad key with what was wrong."""
    problems = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")  # a validator's own sentence names its keys
        where = ".".join(str(p) for p in error["loc"])
        problems.append(f"{where}: {message}" if where else message)
    return "invalid config: " + "; ".join(problems)


def load_recipe(schema: type[Config], path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a YAML recipe, move old keys, apply overrides, validate against ``schema``."""
    data = move_old_keys(read_recipe(path), str(path)) if path is not None else {}
    data = apply_overrides(data, list(overrides or []))
    check_keys(schema, data)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc)) from None


def save_recipe(config: BaseModel, path: str | Path) -> None:
    """Write the resolved config (all defaults filled in) as YAML."""
    Path(path).write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))


def show_config(config: BaseModel) -> str:
    """The resolved config as YAML for ``--print-config``: the keys the recipe (or an override) states
    first, then every other key at its default, commented out and grouped by section.

    Comments aside it is the same config, so the output is itself a recipe that loads to it.
    """
    own, rest = _stated_and_defaults(config, config.model_dump(mode="json"))
    text = yaml.safe_dump(own, sort_keys=False) if own else ""
    if rest:
        text += "\n# Every other key, at its default, by section, with its help (uncomment a line to set it):\n"
        for section, values in rest.items():
            lines = _with_help(type(config), {section: values}, indent=0)
            text += "\n" + "\n".join(f"# {line}" for line in lines) + "\n"
    return text


def _with_help(model: type[BaseModel] | None, values: dict[str, Any], indent: int) -> list[str]:
    """``values`` (a section of ``model``, as JSON) as YAML lines, each key followed by the first
    sentence of its help as a comment. Sections nest as blocks; lists of scalars and empty maps flow."""
    pad = " " * indent
    lines: list[str] = []
    for key, value in values.items():
        field = model.model_fields.get(key) if model is not None else None
        help_ = f"  # {first_sentence(field.description)}" if field is not None and field.description else ""
        sub = _model_of(field.annotation) if field is not None else None
        if isinstance(value, dict) and value:
            lines.append(f"{pad}{key}:{help_}")
            lines += _with_help(sub, value, indent + 2)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):  # envs
            lines.append(f"{pad}{key}:{help_}")
            for item in value:
                block = _with_help(sub, item, indent + 2) or [f"{pad}  {{}}"]
                lines += [f"{pad}- {block[0][indent + 2:]}", *block[1:]]
        else:
            lines.append(f"{pad}{key}: {_flow(value)}{help_}")
    return lines


def _flow(value: Any) -> str:
    """A scalar, list or map as one line of YAML."""
    return yaml.safe_dump([value], default_flow_style=True, width=10**6).strip()[1:-1]


def first_sentence(text: str) -> str:
    """A help text's first sentence (up to a full stop before a capital letter, or the whole text)."""
    text = " ".join(text.split())
    end = re.search(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z`'\"(])", text)  # not after "e.g." or "i.e."
    return text[: end.start() + 1] if end else text


def _stated_and_defaults(model: BaseModel, dumped: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``dumped`` (``model`` as JSON) split into the keys set explicitly and those left at their defaults.

    A section the recipe does not name is all defaults, even where its default was built with
    arguments (``default_factory=lambda: SFTOptions(epochs=1)``).
    """
    own: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for name, value in dumped.items():
        attribute = getattr(model, name, None)
        if isinstance(attribute, BaseModel) and isinstance(value, dict) and name in model.model_fields_set:
            stated, default = _stated_and_defaults(attribute, value)
            if stated:
                own[name] = stated
            if default:
                rest[name] = default
        elif (isinstance(attribute, list) and attribute and name in model.model_fields_set
              and all(isinstance(a, BaseModel) for a in attribute)):  # envs: each entry split alike
            pairs = [_stated_and_defaults(a, v) for a, v in zip(attribute, value, strict=True)]
            own[name] = [stated for stated, _ in pairs]
            if any(default for _, default in pairs):
                rest[name] = [default for _, default in pairs]
        elif name in model.model_fields_set:
            own[name] = value
        else:
            rest[name] = value
    return own, rest
