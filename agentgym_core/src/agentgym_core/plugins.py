"""Plugin discovery and the catalogs built from it.

There is one way in: a plugin is registered with the pluggy manager, by name, and then its
catalog hooks fill the registries. Builtins (``DEFAULT_PLUGINS``) enter through the same door as
third-party plugins from the ``agentgym`` entry-point group; they are listed and can be blocked.

Nothing heavy is imported to find a name. Entry points are read from the installed metadata when
the manager is built, but a plugin module is imported only when something asks for it: looking up
``env_class("textcraft")`` imports the entry point named ``textcraft`` first and the others only
if that one does not provide the name, while listings (``catalog``, ``plugins``) and observer
hooks import them all. A plugin may register ``"module:attribute"`` instead of the object
(Gymnasium's entry-point strings); the module is imported when the object is first used, so
``agentgym plugins`` lists an estimator without importing torch.

Environment variables:
    AGENTGYM_DISABLE_PLUGIN_AUTOLOAD=1   do not load entry-point plugins (builtins still load).
    AGENTGYM_PLUGINS=a,b                 allow-list: load only these entry-point plugins.
    AGENTGYM_BLOCK_PLUGINS=a,b           never load these plugins (builtins included).
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import shlex
import sys
import traceback
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pluggy

from agentgym_core import hookspecs

__all__ = [
    "DEFAULT_PLUGINS",
    "ENTRY_POINT_GROUP",
    "DuplicateRegistrationError",
    "PluginError",
    "PluginInfo",
    "PluginManager",
    "PluginSpec",
    "Registration",
    "SPEC_FIELDS",
    "UnknownNameError",
    "checkout_root",
    "get_plugin_manager",
    "install_hint",
    "lazy_exports",
    "reset_plugin_manager",
]

ENTRY_POINT_GROUP = "agentgym"

DEFAULT_PLUGINS: tuple[str, ...] = ("agentgym_core.builtin",)
"""Modules shipped with the core, registered like any other plugin (name = last dotted part)."""

KNOWN_PROVIDERS: dict[tuple[str, str], str] = {
    ("env", "babyai"): "agentgym_env_babyai",
    ("env", "textcraft"): "agentgym_env_textcraft",
    ("env", "sciworld"): "agentgym_env_sciworld",
    ("env", "search"): "agentgym_env_search",
    ("env", "webarena"): "agentgym_env_webarena",
    ("env", "textarena"): "agentgym_env_textarena",
    ("env", "textworld"): "agentgym_env_textworld",
    ("env", "reasoning_gym"): "agentgym_env_reasoning_gym",
    ("env", "gem"): "agentgym_env_gem",
    ("rollout_backend", "transformers"): "plugins/agentgym_backend_transformers",
    ("rollout_backend", "openai"): "plugins/agentgym_backend_openai",
    ("rollout_backend", "vllm"): "plugins/agentgym_backend_vllm",
    ("advantage_estimator", "gae"): "plugins/agentgym_estimators",
    ("advantage_estimator", "grpo"): "plugins/agentgym_estimators",
    ("advantage_estimator", "rloo"): "plugins/agentgym_estimators",
    ("advantage_estimator", "reinforce_pp"): "plugins/agentgym_estimators",
}
"""(kind, name) of things first-party packages provide -> that package's folder in the agentgym checkout.

These packages are not on the public index (the name ``agentgym`` there is an unrelated project),
so the hint installs the folder: see :func:`install_hint`.
"""


def checkout_root() -> Path | None:
    """The agentgym checkout this core was installed from (editable install), or None."""
    import agentgym_core

    root = Path(agentgym_core.__file__).resolve().parents[3]  # <root>/agentgym_core/src/agentgym_core/
    return root if (root / "agentgym_core" / "pyproject.toml").is_file() else None


def install_hint(folder: str) -> str:
    """The command that installs the first-party package in ``folder`` of the agentgym checkout.

    With an editable core the checkout is known and the path is absolute (it works from any
    directory); otherwise the command is relative to a checkout's root. The command is in
    backticks, so it stands apart from the sentence around it.
    """
    root = checkout_root()
    if root is not None and (root / folder / "pyproject.toml").is_file():
        return f"`pip install -e {shlex.quote(str(root / folder))}`"
    return f"`pip install -e ./{folder}` (in a checkout of agentgym; scripts/install.sh installs every package)"

def lazy_exports(package: str, exports: dict[str, str]) -> None:
    """Make ``package``'s public names load on first use (PEP 562), from the modules that define them.

    ``exports`` maps each public name to its module. A plugin package's ``__init__`` calls this so
    that importing its plugin module (``my_env.plugin``) does not import the whole package and its
    dependencies::

        __all__ = ["MyEnv"]
        lazy_exports(__name__, {"MyEnv": "my_env.env"})
    """
    sys.modules[package].__class__ = _LazyPackage
    sys.modules[package].__dict__["_lazy_exports"] = dict(exports)


class _LazyPackage(types.ModuleType):
    """A package whose exported names are imported from their modules when first looked up."""

    _lazy_exports: dict[str, str]

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__.get("_lazy_exports", {}).get(name)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        self.__dict__[name] = value  # the next lookup is a plain attribute
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        # Importing submodule ``pkg.gae`` sets attribute ``gae`` on the package; where the package
        # exports a function ``gae`` from that module, the function must stay the public name.
        if isinstance(value, types.ModuleType) and self.__dict__.get("_lazy_exports", {}).get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(self.__dict__) | set(self.__dict__.get("_lazy_exports", {})))


_KIND_LABELS = {
    "env": "environment",
    "advantage_estimator": "advantage estimator",
    "rollout_backend": "rollout backend",
    "round_scheduler": "round scheduler",
    "expert": "expert policy",
}


class PluginError(Exception):
    """Base class of plugin and registry errors."""


class DuplicateRegistrationError(PluginError):
    """Two plugins registered the same name in one catalog."""


class UnknownNameError(PluginError, KeyError):
    """A name was looked up that no loaded plugin registered."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True)
class PluginInfo:
    """One plugin as `agentgym plugins` lists it."""

    name: str
    package: str
    version: str
    status: str  # "ok" | "broken" | "blocked"
    builtin: bool = False
    error: str | None = None


# What a registration may declare beside its object, by catalog kind (the keyword arguments of ``register``).
SPEC_FIELDS: dict[str, tuple[str, ...]] = {
    "advantage_estimator": ("options", "min_group_size", "critic"),
    "round_scheduler": ("options",),
    "rollout_backend": ("capabilities", "options"),
}


@dataclass(frozen=True)
class PluginSpec:
    """What a plugin declares about a registered object, kept beside it as Gymnasium keeps an ``EnvSpec``.

    Given as keyword arguments of ``register`` (``register("grpo", grpo, min_group_size=2)``); a value may be
    a ``"module:attribute"`` reference, imported when first read. Which kinds take which fields:
    :data:`SPEC_FIELDS`.
    """

    options: Any = None
    """Estimators and schedulers: the class of their recipe options (a subclass of ``AdvantageConfig`` or
    ``RoundsConfig``); None: the core's own. Rollout backends: the pydantic class ``rollout.backend_options``
    is checked against when the recipe loads (the factory receives its fields; ``model`` is filled from
    ``model.path``); None: the options are not checked before the backend starts."""
    min_group_size: Any = None
    """Estimators: the samples per task they need for a non-zero advantage (2 for a group baseline); None: 1."""
    critic: Any = None
    """Estimators: True when they read critic values (``batch.values``), so the recipe must enable
    ``algorithm.critic``; None: False."""
    capabilities: Any = None
    """Rollout backends: a ``BackendCapabilities``; None: the defaults."""


@dataclass(frozen=True)
class Registration:
    """One named thing a plugin put into a catalog.

    ``target`` is what the plugin registered: the object itself, or a ``"module:attribute"``
    string that :attr:`obj` imports on first use. ``spec`` is what the plugin declared about it.
    """

    kind: str
    name: str
    target: Any
    plugin: str
    package: str
    version: str
    summary: str = ""
    spec: PluginSpec = field(default_factory=PluginSpec)
    _loaded: list[Any] = field(default_factory=list, repr=False, compare=False)

    def declared(self, name: str) -> Any:
        """Spec field ``name``: what the registration declared (a reference is imported now), or None."""
        value = getattr(self.spec, name)
        return _import_reference(value, self) if isinstance(value, str) else value

    @property
    def obj(self) -> Any:
        """The registered object, imported now if the plugin registered it by reference."""
        if not isinstance(self.target, str):
            return self.target
        if not self._loaded:
            self._loaded.append(_import_reference(self.target, self))
        return self._loaded[0]

    @property
    def is_loaded(self) -> bool:
        """Whether using :attr:`obj` imports nothing more."""
        return not isinstance(self.target, str) or bool(self._loaded)


def _import_reference(reference: str, registration: Registration) -> Any:
    where = (f"plugin {registration.plugin!r} (package {registration.package}) registered the "
             f"{_KIND_LABELS[registration.kind]} {registration.name!r} as {reference!r}")
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(f"{where}, which failed to import: {type(exc).__name__}: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise PluginError(f"{where}, but module {module_name!r} has no attribute {attribute!r}") from None


def _check_reference(reference: str) -> str | None:
    """Why ``reference`` is not a ``"module:attribute"`` string, or None when it is one."""
    module_name, colon, attribute = reference.partition(":")
    if not colon or not attribute.isidentifier() or not all(p.isidentifier() for p in module_name.split(".")):
        return f"{reference!r} is not a 'module:attribute' reference (e.g. 'my_env.env:MyEnv')"
    return None


def _split_env_list(value: str | None) -> set[str] | None:
    if value is None or not value.strip():
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _distribution_name(ep: metadata.EntryPoint) -> str:
    """The normalised name of the distribution that declares ``ep`` (PEP 503), or "?"."""
    dist = getattr(ep, "dist", None)
    return re.sub(r"[-_.]+", "-", dist.name).lower() if dist is not None else "?"


def _core_version() -> str:
    try:
        return metadata.version("agentgym-core")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@dataclass
class PluginManager:
    """The one pluggy manager plus the catalogs its plugins fill.

    Args:
        autoload: load entry-point plugins; default: unless AGENTGYM_DISABLE_PLUGIN_AUTOLOAD=1.
        allow: entry-point names to load (None = all); default from AGENTGYM_PLUGINS.
        block: plugin names never to load; default from AGENTGYM_BLOCK_PLUGINS.
        builtins: register DEFAULT_PLUGINS.
    """

    autoload: bool | None = None
    allow: Iterable[str] | None = None
    block: Iterable[str] | None = None
    builtins: bool = True
    _pm: pluggy.PluginManager = field(init=False, repr=False)
    _infos: dict[str, PluginInfo] = field(init=False, default_factory=dict, repr=False)
    _catalogs: dict[str, dict[str, Registration]] = field(init=False, default_factory=dict)
    _pending: dict[str, metadata.EntryPoint] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.autoload is None:
            self.autoload = os.environ.get("AGENTGYM_DISABLE_PLUGIN_AUTOLOAD", "") not in ("1", "true")
        allow = _split_env_list(os.environ.get("AGENTGYM_PLUGINS")) if self.allow is None else set(self.allow)
        block = _split_env_list(os.environ.get("AGENTGYM_BLOCK_PLUGINS")) if self.block is None else set(self.block)
        self._allow, self._block = allow, block or set()
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        if self.builtins:
            for module_name in DEFAULT_PLUGINS:
                self._load(module_name.rsplit(".", 1)[-1], lambda m=module_name: importlib.import_module(m),
                           package="agentgym-core", version=_core_version(), builtin=True)
        if self.autoload:
            self._load_entry_points()

    # -- loading --------------------------------------------------------------------------------
    def _load_entry_points(self) -> None:
        """Note every allowed entry point; each is imported when first needed (``_load_pending``).

        Two distributions naming the same entry point is a clash: neither loads, and the plugin is listed
        as broken with both names and how to choose, rather than one silently replacing the other.
        """
        claims: dict[str, dict[str, metadata.EntryPoint]] = {}
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if self._allow is not None and ep.name not in self._allow:
                continue
            # The same distribution visible twice on sys.path (an editable install beside a copy) is one claim.
            claims.setdefault(ep.name, {}).setdefault(_distribution_name(ep), ep)
        for name, by_distribution in claims.items():
            if len(by_distribution) == 1:
                self._pending[name] = next(iter(by_distribution.values()))
                continue
            packages = sorted(by_distribution)
            self._infos[name] = PluginInfo(name, " + ".join(packages), "?", "broken", error=(
                f"two distributions claim the plugin name {name!r}: {' and '.join(packages)}; neither is loaded. "
                f"Keep one (pip uninstall {packages[-1]}, or pip uninstall {packages[0]}); a third-party package "
                f"should name its entry point after its own package"))

    def _load_pending(self, names: Iterable[str] | None = None) -> None:
        """Import the entry-point plugins ``names`` (default: all) that are not imported yet."""
        for name in list(self._pending if names is None else names):
            ep = self._pending.pop(name, None)
            if ep is None:
                continue
            dist = getattr(ep, "dist", None)
            self._load(ep.name, ep.load, package=dist.name if dist else "?",
                       version=dist.version if dist else "?", builtin=False)

    def _load(self, name: str, load: Any, *, package: str, version: str, builtin: bool) -> None:
        if name in self._block:
            self._infos[name] = PluginInfo(name, package, version, "blocked", builtin)
            return
        try:
            plugin = load()
            self._pm.register(plugin, name=name)
        except Exception as exc:  # a broken plugin must not take the others down
            error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self._infos[name] = PluginInfo(name, package, version, "broken", builtin, error)
            return
        self._infos[name] = PluginInfo(name, package, version, "ok", builtin)
        self._catalogs.clear()

    def register(self, plugin: Any, name: str, *, package: str = "<local>", version: str = "0") -> None:
        """Register a plugin object directly (tests, notebooks, scripts)."""
        self._load(name, lambda: plugin, package=package, version=version, builtin=False)

    # -- introspection --------------------------------------------------------------------------
    @property
    def hook(self) -> Any:
        """Call observer hooks: ``pm.hook.agentgym_observe_update(step=..., metrics=...)``."""
        self._load_pending()  # an observer may live in any plugin
        return self._pm.hook

    def plugins(self) -> list[PluginInfo]:
        self._load_pending()
        return sorted(self._infos.values(), key=lambda p: (not p.builtin, p.name))

    def broken_plugins(self) -> list[PluginInfo]:
        self._load_pending()
        return [p for p in self._infos.values() if p.status == "broken"]

    def catalog(self, kind: str) -> dict[str, Registration]:
        """All registrations of one kind (``env``, ``advantage_estimator``, ...), by name."""
        if kind not in hookspecs.CATALOG_HOOKS:
            raise ValueError(f"unknown catalog kind {kind!r}; expected one of {sorted(hookspecs.CATALOG_HOOKS)}")
        self._load_pending()
        return self._loaded_catalog(kind)

    def registrations(self) -> list[Registration]:
        """Every registration of every catalog, kind by kind in the order of the catalog hooks (what
        ``agentgym plugins`` lists under each plugin)."""
        return [registration for kind in hookspecs.CATALOG_HOOKS for registration in self.catalog(kind).values()]

    def _loaded_catalog(self, kind: str) -> dict[str, Registration]:
        """The registrations of ``kind`` among the plugins imported so far."""
        if kind not in self._catalogs:
            self._catalogs[kind] = self._build_catalog(kind)
        return self._catalogs[kind]

    def _build_catalog(self, kind: str) -> dict[str, Registration]:
        catalog: dict[str, Registration] = {}
        caller = getattr(self._pm.hook, hookspecs.CATALOG_HOOKS[kind])
        for impl in caller.get_hookimpls():
            info = self._infos[impl.plugin_name]

            def register(name: str, obj: Any, *, summary: str = "", _info: PluginInfo = info,
                         **declared: Any) -> None:
                allowed = SPEC_FIELDS.get(kind, ())
                for key, value in declared.items():
                    if key not in allowed:
                        takes = f"takes only {', '.join(f'{a}=' for a in allowed)}" if allowed else "takes none"
                        raise PluginError(f"plugin {_info.name!r} registered the {_KIND_LABELS[kind]} {name!r} with "
                                          f"{key}=, which a {_KIND_LABELS[kind]} does not declare (it {takes})")
                    if isinstance(value, str) and (problem := _check_reference(value)) is not None:
                        raise PluginError(f"plugin {_info.name!r} declared {key}= of the {_KIND_LABELS[kind]} "
                                          f"{name!r} by reference, but {problem}")
                if not isinstance(name, str) or not name:
                    raise PluginError(f"plugin {_info.name!r} registered a {kind} with an invalid name {name!r}")
                if isinstance(obj, str) and (problem := _check_reference(obj)) is not None:
                    raise PluginError(f"plugin {_info.name!r} registered the {_KIND_LABELS[kind]} {name!r} "
                                      f"by reference, but {problem}")
                if name in catalog:
                    first = catalog[name]
                    raise DuplicateRegistrationError(
                        f"two plugins register the {_KIND_LABELS[kind]} {name!r}: plugin {first.plugin!r} "
                        f"(package {first.package}) and plugin {_info.name!r} (package {_info.package}). "
                        f"Uninstall one of them or block one with AGENTGYM_BLOCK_PLUGINS={_info.name}."
                    )
                catalog[name] = Registration(kind, name, obj, _info.name, _info.package, _info.version, summary,
                                             PluginSpec(**declared))

            kwargs = {"register": register} if "register" in impl.argnames else {}
            impl.function(**kwargs)
        return catalog

    def registration(self, kind: str, name: str) -> Registration:
        """The registration of ``name`` in catalog ``kind`` (see :meth:`get`); its ``declared(field)`` reads what
        the plugin declared about it."""
        if kind not in hookspecs.CATALOG_HOOKS:
            raise ValueError(f"unknown catalog kind {kind!r}; expected one of {sorted(hookspecs.CATALOG_HOOKS)}")
        self._load_pending([name])
        registration = self._loaded_catalog(kind).get(name)
        if registration is None:
            registration = self.catalog(kind).get(name)
        if registration is None:
            raise UnknownNameError(self._unknown_message(kind, name, sorted(self.catalog(kind))))
        return registration

    def get(self, kind: str, name: str) -> Any:
        """The object registered under ``name`` in catalog ``kind``; a teaching error if absent.

        The entry point of the same name is imported first (``agentgym serve textcraft`` imports
        the ``textcraft`` plugin, not the estimators and their torch); the other plugins are
        imported only when it does not provide ``name``.
        """
        return self.registration(kind, name).obj

    def _unknown_message(self, kind: str, name: str, known: list[str]) -> str:
        label = _KIND_LABELS[kind]
        parts = [f"unknown {label} {name!r}."]
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        if close:
            parts.append("Did you mean " + " or ".join(repr(c) for c in close) + "?")
        parts.append(f"Installed {label}s: {', '.join(known) if known else 'none'}.")
        folder = KNOWN_PROVIDERS.get((kind, name))
        if folder is not None:
            package = folder.rsplit("/", 1)[-1].replace("_", "-")
            parts.append(f"{name!r} is provided by agentgym's package {package}; install it with {install_hint(folder)}.")
        else:
            parts.append("Is the package that provides it installed? `agentgym plugins` lists what is loaded.")
        broken = self.broken_plugins()
        if broken:
            parts.append("Plugins that failed to load: "
                         + "; ".join(f"{p.name} ({p.package}): {p.error}" for p in broken))
        return " ".join(parts)

    # -- conveniences ------------------------------------------------------------------------------
    def env_class(self, name: str) -> Any:
        return self.get("env", name)


_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, built on first use from the environment variables."""
    global _manager
    if _manager is None:
        _manager = PluginManager()
    return _manager


def reset_plugin_manager(manager: PluginManager | None = None) -> None:
    """Replace (or forget) the process-wide manager; tests use this to control discovery."""
    global _manager
    _manager = manager
