"""The docs' reference pages, generated from the code so that they cannot drift from it.

MkDocs loads this file as a hook (``hooks:`` in mkdocs.yml): a page holding a line
``<!-- reference: NAME -->`` gets that line replaced by the generated Markdown of NAME:

- ``recipe-rl`` / ``recipe-finetune``: every key of the RL and fine-tuning recipes, walked from
  their pydantic models (``TrainConfig``, ``FinetuneConfig``), with type, default and help text;
  ``plugin-options``: the keys that installed estimators, round schedulers and rollout backends add,
  read from what each plugin declares (``register(..., options=...)``);
- ``cli``: every ``agentgym`` command and option, from the argparse parsers;
- ``http``: every route of the environment server, from its OpenAPI description;
- ``hooks``: every hook, from the docstrings of ``agentgym_core/hookspecs.py``;
- ``metrics``: every metric a run logs, from ``agentgym_core.viewer.metric_docs.METRICS`` (the table
  the viewer's tooltips read), grouped by the viewer's chart sections.

A key without help text is an error (:class:`MissingHelp`), so a strict build fails on it. Run
``python scripts/docs_reference.py NAME`` to print one reference.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MARKER = re.compile(r"^<!-- reference: ([\w-]+) -->$", re.M)


class MissingHelp(ValueError):
    """A recipe key has no help text (``Field(description=...)``)."""


# -- shared helpers ----------------------------------------------------------------------------------


def rst_to_markdown(text: str) -> str:
    """Docstring reST to Markdown: ``code`` and :role:`target` become `code`; ``::`` blocks become fences."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    lines, out, in_block, indent = text.splitlines(), [], False, 0
    for line in lines:
        if in_block:
            if line.strip() and len(line) - len(line.lstrip()) < indent:
                while out and not out[-1]:
                    out.pop()
                out += ["```", ""]
                in_block = False
            else:
                if line.strip() or out[-1] != "```":  # no blank first line inside the fence
                    out.append(line[indent:] if line.strip() else "")
                continue
        if line.rstrip().endswith("::"):
            out.append(line.rstrip()[:-1] if not line.rstrip().endswith(" ::") else line.rstrip()[:-3])
            out.append("")
            out.append("```")
            in_block, indent = True, len(line) - len(line.lstrip()) + 4
            continue
        out.append(line)
    if in_block:
        out.append("```")
    return "\n".join(out).strip()


def cell(text: str) -> str:
    """Text that is safe inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


# -- recipe keys -------------------------------------------------------------------------------------


def model_class(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``X``, ``X | None``, ``list[X]`` or ``SerializeAsAny[X]``."""
    from agentgym_core.recipes import _model_of  # the recipe loader's own walk, so both agree

    return _model_of(annotation)


def type_name(annotation: Any) -> str:
    """A short readable name of a field's type: ``int | None``, ``list[str]``, ``'a' | 'b'``."""
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in get_args(annotation))
    if origin is not None:
        args = get_args(annotation)
        base = getattr(origin, "__name__", str(origin))
        if base == "Annotated" or not args:  # SerializeAsAny[X] and friends
            return type_name(args[0]) if args else base
        return f"{base}[{', '.join(type_name(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value!r}`" if not isinstance(value, str) else f"`{value}`"


def walk_keys(
    model: type[BaseModel], prefix: str = ""
) -> Iterator[tuple[str, FieldInfo, type[BaseModel] | None]]:
    """Every key of ``model`` depth first, as (dotted key, field, nested model or None)."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        nested = model_class(info.annotation)
        yield key, info, nested
        if nested is not None:
            sub = (
                f"{key}[]."
                if get_origin(info.annotation) is list or "list[" in type_name(info.annotation)
                else f"{key}."
            )
            yield from walk_keys(nested, sub)


def keys_without_help(model: type[BaseModel]) -> list[str]:
    """The keys of ``model`` (nested sections included) whose field has no description."""
    return [key for key, info, _ in walk_keys(model) if not (info.description or "").strip()]


def section_tables(model: type[BaseModel], title: str, prefix: str = "") -> list[str]:
    """Markdown: one heading and key table per section of ``model``, nested sections after their parent."""
    missing = keys_without_help(model)
    if missing:
        raise MissingHelp(
            f"{title}: these keys have no help text: {', '.join(missing)}; give each field a "
            "one-sentence Field(description=...)"
        )
    out: list[str] = []
    doc = rst_to_markdown(inspect.getdoc(model) or "")
    heading = f"`{prefix.rstrip('.')}`" if prefix else "Top level"
    out += [f"### {heading}", "", doc, "", "| key | type | default | help |", "|---|---|---|---|"]
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        sub = model_class(info.annotation)
        if sub is not None:
            is_list = "list[" in type_name(info.annotation)
            nested.append((f"{key}[]." if is_list else f"{key}.", sub))
        out.append(
            f"| `{key}` | {cell(type_name(info.annotation))} | {cell(default_text(info))} | "
            f"{cell(info.description or '')} |"
        )
    out.append("")
    for sub_prefix, sub in nested:
        out += section_tables(sub, title, sub_prefix)
    return out


def recipe_rl() -> str:
    from agentgym_core.rl.config import TrainConfig

    return "\n".join(section_tables(TrainConfig, "The RL recipe (`agentgym train`)"))


def recipe_finetune() -> str:
    from agentgym_core.finetune.config import FinetuneConfig
    from agentgym_core.rl.config import TrainConfig

    shared = [
        name
        for name in FinetuneConfig.model_fields
        if name in TrainConfig.model_fields
        and FinetuneConfig.model_fields[name].annotation == TrainConfig.model_fields[name].annotation
        and name != "trainer"
    ]
    out = [
        f"The sections {', '.join(f'`{s}`' for s in shared)} have the same keys as in the RL recipe "
        "(above); defaults may differ where the table below says so.",
        "",
    ]
    out += ["### Top level", "", "| key | type | default | help |", "|---|---|---|---|"]
    own: list[tuple[str, type[BaseModel]]] = []
    for name, info in FinetuneConfig.model_fields.items():
        out.append(
            f"| `{name}` | {cell(type_name(info.annotation))} | {cell(default_text(info))} | "
            f"{cell(info.description or '')} |"
        )
        sub = model_class(info.annotation)
        if sub is not None and name not in shared:
            own.append((f"{name}.", sub))
    out.append("")
    missing = keys_without_help(FinetuneConfig)
    if missing:
        raise MissingHelp(f"the fine-tuning recipe: these keys have no help text: {', '.join(missing)}")
    for prefix, sub in own:
        out += section_tables(sub, "The fine-tuning recipe", prefix)
    return "\n".join(out)


def plugin_option_sections() -> Iterator[tuple[str, str, Any, type[BaseModel], dict[str, FieldInfo]]]:
    """(recipe section, plugin name, registration, options class, its own keys) of every installed plugin that
    declares options (``register(..., options=...)``), read from the plugin record as the recipe loader reads it."""
    from agentgym_core.plugins import PluginManager
    from agentgym_core.rl.estimator_api import AdvantageConfig
    from agentgym_core.schedulers import RoundsConfig

    manager = PluginManager(autoload=True)
    for kind, section, core_keys in (
        ("advantage_estimator", "algorithm.advantage", set(AdvantageConfig.model_fields)),
        ("round_scheduler", "algorithm.rounds_ctrl", set(RoundsConfig.model_fields)),
        ("rollout_backend", "rollout.backend_options", {"model"}),  # model is filled from model.path
    ):
        for name, registration in sorted(manager.catalog(kind).items()):
            options = registration.declared("options")
            if options is None:
                continue
            own = {k: v for k, v in options.model_fields.items() if k not in core_keys}
            if own:
                yield section, name, registration, options, own


def plugin_options() -> str:
    """Keys that installed plugins add: estimators to ``algorithm.advantage``, round schedulers to
    ``algorithm.rounds_ctrl``, rollout backends to ``rollout.backend_options``."""
    out: list[str] = []
    for section, name, registration, _, own in plugin_option_sections():
        lacking = [k for k, v in own.items() if not (v.description or "").strip()]
        if lacking:
            raise MissingHelp(
                f"{registration.kind} {name!r} (package {registration.package}): options without help "
                f"text: {', '.join(lacking)}"
            )
        chosen = "rollout.backend" if section.startswith("rollout.") else (
            "algorithm.estimator" if section == "algorithm.advantage" else "algorithm.rounds_ctrl.type")
        out += [
            f"### `{section}` with `{chosen}: {name}`",
            "",
            f"Added by the package `{registration.package}`.",
            "",
            "| key | type | default | help |",
            "|---|---|---|---|",
        ]
        out += [
            f"| `{section}.{k}` | {cell(type_name(v.annotation))} | {cell(default_text(v))} | "
            f"{cell(v.description)} |"
            for k, v in own.items()
        ]
        out.append("")
    return "\n".join(out) if out else "No installed plugin adds options."


# -- the command line --------------------------------------------------------------------------------


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)  # noqa: SLF001 (argparse offers no public way)


def _arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | help |", "|---|---|"]
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):  # noqa: SLF001
            continue
        if action.help == argparse.SUPPRESS:
            continue
        name = ", ".join(action.option_strings) or action.metavar or action.dest
        if action.option_strings and action.nargs != 0:
            metavar = action.metavar or action.dest.upper()
            name += f" {' '.join(metavar) if isinstance(metavar, tuple) else metavar}"
        rows.append(f"| `{cell(name)}` | {cell(_help(parser, action))} |")
    return rows


def cli() -> str:
    from agentgym_core.cli import build_parser

    parser = build_parser()
    out = [
        "## `agentgym`",
        "",
        cell(parser.description or ""),
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
        *_arguments_table(parser),
        "",
    ]
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    helps = {choice.dest: choice.help for choice in subparsers._choices_actions}  # noqa: SLF001
    for name, sub in sorted(subparsers.choices.items()):
        out += [
            f"## `agentgym {name}`",
            "",
            cell(sub.description or helps.get(name) or ""),
            "",
            "```text",
            sub.format_usage().strip(),
            "```",
            "",
            *_arguments_table(sub),
            "",
        ]
    return "\n".join(out)


# -- the HTTP protocol -------------------------------------------------------------------------------


def _reference_env() -> type:
    """The smallest environment class: the routes and schemas do not depend on which one is served."""
    from agentgym_core.env import Env, ResetResult, StepResult, TaskCatalog

    class DocsEnv(Env):
        name = "docs"
        instruction = "Say done."

        @classmethod
        def tasks(cls) -> TaskCatalog:
            return TaskCatalog(splits={"train": [0], "test": [1]})

        def reset(self, task_id: int | None = None, seed: int | None = None) -> ResetResult:
            return ResetResult(observation="Say done.")

        def step(self, action: str) -> StepResult:
            return StepResult(observation="ok", reward=1.0, terminated=True, success=True)

    return DocsEnv


def _schema_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    return f"`{schema.get('type', 'object')}`"


def http() -> str:
    from agentgym_core.http.server import create_app

    spec = create_app(_reference_env()).openapi()
    out = [
        f"Generated from the server's OpenAPI description (version {spec['info'].get('version', '?')}); a "
        "running server serves the same at `/openapi.json`, browsable at `/docs`.",
        "",
        "### Routes",
        "",
        "| route | does | request body | answer |",
        "|---|---|---|---|",
    ]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            ok = next((r for code, r in op.get("responses", {}).items() if code.startswith("2")), {})
            answer = ok.get("content", {}).get("application/json", {}).get("schema")
            summary = op.get("description") or op.get("summary") or ""
            out.append(
                f"| `{method.upper()} {path}` | {cell(summary.splitlines()[0] if summary else '')} | "
                f"{_schema_name(body)} | {_schema_name(answer)} |"
            )
    out += ["", "### Schemas", ""]
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        out += [f"#### {name}", "", cell(schema.get("description", "")), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, prop in props.items():
                kind = (
                    _schema_name(prop)
                    if ("$ref" in prop or "anyOf" in prop)
                    else f"`{prop.get('type', 'any')}`"
                )
                out.append(
                    f"| `{field}` | {kind} | {'yes' if field in required else ''} | "
                    f"{cell(prop.get('description', ''))} |"
                )
            out.append("")
    return "\n".join(out)


# -- hooks ---------------------------------------------------------------------------------------------


def hooks() -> str:
    from agentgym_core import hookspecs

    out: list[str] = []
    groups = (
        ("Catalog hooks", list(hookspecs.CATALOG_HOOKS.values())),
        ("Observer hooks", list(hookspecs.OBSERVER_HOOKS)),
    )
    for title, names in groups:
        out += [f"## {title}", ""]
        for name in names:
            fn = getattr(hookspecs, name)
            signature = str(inspect.signature(fn)).replace("'", "")
            out += [
                f"### `{name}`",
                "",
                "```python",
                f"{name}{signature}",
                "```",
                "",
                rst_to_markdown(inspect.getdoc(fn) or ""),
                "",
            ]
    return "\n".join(out)


# -- metrics ---------------------------------------------------------------------------------------------

_SECTION_TITLES = {
    "headline": ("Outcomes and losses", "The first charts of the viewer: what a reader opens a run for."),
    "rollout": ("Rollouts", "Sampling: how many trajectories, how many carried signal, what failed."),
    "loss": ("The update", "What the policy update is judged by: its losses, clipping, KL, entropy and the "
             "sampler-learner mismatch."),
    "sampler_kl": ("Sampler mismatch by group", "`sampler_kl` per environment (`<env>` is its name) and per "
                   "rollout worker (`worker0`, `worker1`, ...); the mismatch stop reads the worst."),
    "optimizer": ("Optimizer", ""),
    "timing": ("Time and memory", ""),
    "eval": ("Evaluation only", "Keys only evaluation lines have."),
    "pool": ("Environment servers", "One set per server of an environment's pool (`<server>` is `s0`, `s1`, ... "
             "in the order of the env's `urls`)."),
    "curriculum": ("Curriculum", "Written when `rollout.curriculum` is on."),
    "fine-tuning": ("Fine-tuning runs", "`agentgym finetune` (SFT, DPO) and rejection sampling."),
}


def metric_group(doc: Any) -> str:
    """The viewer's section of a documented metric (``fine-tuning`` for fine-tuning's own)."""
    from agentgym_core.viewer.layout import metric_section

    if doc.writer == "fine-tuning":
        return "fine-tuning"
    if doc.writer == "evaluation":
        return "eval"
    return metric_section(doc.name)


def _prose(text: str) -> str:
    """A metric's help text in a table cell: dotted recipe keys and metric names as code, no raw ``<``."""
    text = re.sub(r"\b[a-z_]+(?:\.[a-z_]+)+\b|\b[a-z]+(?:_[a-z]+)+\b|\bpool/\S+?(?=[,;)]|\.? |$)", r"`\g<0>`", text)
    parts = text.split("`")  # even parts are prose, odd parts code spans
    parts[::2] = [part.replace("<", "&lt;").replace(">", "&gt;") for part in parts[::2]]
    return cell("`".join(parts))


def metrics() -> str:
    from agentgym_core.viewer.metric_docs import METRICS

    groups: dict[str, list[Any]] = {}
    for doc in METRICS:
        groups.setdefault(metric_group(doc), []).append(doc)
    unknown = set(groups) - set(_SECTION_TITLES)
    if unknown:
        raise ValueError(f"metric sections without a title in scripts/docs_reference.py: {sorted(unknown)}")
    from agentgym_core.viewer.layout import SECTION_ORDER

    out: list[str] = []
    order = [*SECTION_ORDER, *(s for s in _SECTION_TITLES if s not in SECTION_ORDER)]  # the viewer's order
    for section in order:
        if section not in groups:
            continue
        title, intro = _SECTION_TITLES[section]
        out += [f"## {title}", ""] + ([intro, ""] if intro else [])
        out += ["| metric | what it measures | healthy | when it is not |", "|---|---|---|---|"]
        for doc in groups[section]:
            who = {"evaluation": " (evaluation)", "both": " (training and evaluation)"}.get(doc.writer, "")
            out.append(f"| `{doc.name}`{who} | {_prose(doc.meaning)} | {_prose(doc.healthy)} | {_prose(doc.action)} |")
        out.append("")
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {
    "metrics": metrics,
    "recipe-rl": recipe_rl,
    "recipe-finetune": recipe_finetune,
    "plugin-options": plugin_options,
    "cli": cli,
    "http": http,
    "hooks": hooks,
}


def hookspecs_intro() -> str:
    from agentgym_core import hookspecs

    return rst_to_markdown(inspect.getdoc(hookspecs) or "")


GENERATORS["hooks-intro"] = hookspecs_intro


def expand(markdown: str) -> str:
    """``markdown`` with every reference marker replaced by its generated text."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown reference {name!r}; known: {', '.join(sorted(GENERATORS))}")
        return GENERATORS[name]()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: expand the reference markers of each page."""
    return expand(markdown)


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(GENERATORS)
    for name in names:
        print(GENERATORS[name]())
