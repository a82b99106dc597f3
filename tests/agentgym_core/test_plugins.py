"""Plugin discovery: builtins, entry points, broken and duplicate plugins, allow/block lists."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from agentgym_core import hookimpl
from agentgym_core.plugins import DuplicateRegistrationError, PluginError, PluginManager, UnknownNameError


def make_distribution(root: Path, dist: str, plugins: dict[str, str]) -> None:
    """Write a real installed distribution (dist-info with entry points) plus its plugin modules."""
    info = root / f"{dist.replace('-', '_')}-1.2.3.dist-info"  # wheel naming: no dash in the name
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    lines = ["[agentgym]"]
    for ep_name, source in plugins.items():
        module = f"{dist.replace('-', '_')}_{ep_name}_{root.name}"
        (root / f"{module}.py").write_text(textwrap.dedent(source))
        lines.append(f"{ep_name} = {module}")
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


GOOD_ENV = """
    from agentgym_core import hookimpl
    from agentgym_env_guess import GuessEnv

    @hookimpl
    def agentgym_register_envs(register):
        register("{name}", GuessEnv, summary="a test env")
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    for var in ("AGENTGYM_PLUGINS", "AGENTGYM_BLOCK_PLUGINS", "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_builtin_is_registered_like_a_plugin_and_can_be_blocked():
    manager = PluginManager(autoload=False)
    (builtin,) = manager.plugins()
    assert (builtin.name, builtin.package, builtin.status, builtin.builtin) == ("builtin", "agentgym-core", "ok", True)
    assert "fixed" in manager.catalog("round_scheduler")
    blocked = PluginManager(autoload=False, block=["builtin"])
    assert blocked.plugins()[0].status == "blocked"
    assert blocked.catalog("round_scheduler") == {}


def test_entry_point_plugin_is_discovered_with_its_package(site):
    make_distribution(site, "agentgym-env-alpha", {"alpha": GOOD_ENV.format(name="alpha")})
    manager = PluginManager(autoload=True, allow=["alpha"])
    registration = manager.catalog("env")["alpha"]
    assert (registration.plugin, registration.package, registration.version) == ("alpha", "agentgym-env-alpha", "1.2.3")
    assert registration.summary == "a test env"


def test_registrations_lists_every_catalog_s_entries_with_their_kind(site):
    """What `agentgym plugins` shows under each plugin: an env and the builtin's schedulers, each with its kind."""
    make_distribution(site, "agentgym-env-alpha", {"alpha": GOOD_ENV.format(name="alpha")})
    manager = PluginManager(autoload=True, allow=["alpha"])
    listed = {(r.plugin, f"{r.kind}:{r.name}") for r in manager.registrations()}
    assert ("alpha", "env:alpha") in listed and ("builtin", "round_scheduler:fixed") in listed
    assert len(listed) == sum(len(manager.catalog(kind)) for kind in {r.kind for r in manager.registrations()})


def test_broken_plugin_is_listed_with_its_error_and_others_still_load(site):
    make_distribution(site, "agentgym-env-alpha", {"alpha": GOOD_ENV.format(name="alpha")})
    make_distribution(site, "agentgym-env-broken", {"broken": "import not_a_module_anywhere_xyz\n"})
    manager = PluginManager(autoload=True, allow=["alpha", "broken"])
    status = {p.name: p for p in manager.plugins()}
    assert status["broken"].status == "broken"
    assert status["broken"].package == "agentgym-env-broken"
    assert "not_a_module_anywhere_xyz" in status["broken"].error
    assert status["alpha"].status == "ok", status["alpha"].error
    assert "alpha" in manager.catalog("env")
    with pytest.raises(UnknownNameError, match="failed to load: broken"):
        manager.get("env", "missing")


def test_duplicate_name_is_an_error_naming_both_packages(site):
    make_distribution(site, "agentgym-env-alpha", {"alpha": GOOD_ENV.format(name="same")})
    make_distribution(site, "agentgym-env-beta", {"beta": GOOD_ENV.format(name="same")})
    manager = PluginManager(autoload=True, allow=["alpha", "beta"])
    with pytest.raises(DuplicateRegistrationError) as excinfo:
        manager.catalog("env")
    assert "agentgym-env-alpha" in str(excinfo.value) and "agentgym-env-beta" in str(excinfo.value)


def test_allow_list_and_disable_variables(site, monkeypatch):
    make_distribution(site, "agentgym-env-alpha", {"alpha": GOOD_ENV.format(name="alpha")})
    make_distribution(site, "agentgym-env-beta", {"beta": GOOD_ENV.format(name="beta")})
    monkeypatch.setenv("AGENTGYM_PLUGINS", "beta")
    assert set(PluginManager().catalog("env")) == {"beta"}
    monkeypatch.setenv("AGENTGYM_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert PluginManager().catalog("env") == {}
    monkeypatch.delenv("AGENTGYM_DISABLE_PLUGIN_AUTOLOAD")
    monkeypatch.setenv("AGENTGYM_BLOCK_PLUGINS", "beta")
    assert PluginManager().catalog("env") == {}


def test_unknown_name_suggests_close_match_and_package():
    class Plugin:
        @hookimpl
        def agentgym_register_envs(self, register):
            from agentgym_env_guess import GuessEnv

            register("guess", GuessEnv)

    manager = PluginManager(autoload=False)
    manager.register(Plugin(), "local")
    with pytest.raises(UnknownNameError, match=r"Did you mean 'guess'\?"):
        manager.get("env", "gues")
    root = Path(__file__).resolve().parents[2]  # this suite runs against the checkout's editable core
    with pytest.raises(UnknownNameError, match=rf"pip install -e {re.escape(str(root / 'agentgym_env_sciworld'))}"):
        manager.get("env", "sciworld")


def test_hook_may_take_a_subset_of_arguments():
    calls = []

    class Observer:
        @hookimpl
        def agentgym_observe_update(self, step):
            calls.append(step)

    manager = PluginManager(autoload=False)
    manager.register(Observer(), "observer")
    manager.hook.agentgym_observe_update(step=7, metrics={"loss": 1.0})
    assert calls == [7]


LAZY_ENV = """
    from agentgym_core import hookimpl

    @hookimpl
    def agentgym_register_envs(register):
        register("{name}", "{module}:GuessEnv", summary="registered by reference")
"""

RECORDS_IMPORT = """
    import sys
    sys.modules.setdefault("imported_plugins_log", type(sys)("imported_plugins_log")).__dict__.setdefault(
        "names", []).append("{name}")
""" + GOOD_ENV


def test_registration_by_reference_imports_its_module_only_when_used(site):
    (site / "alpha_heavy_module.py").write_text("IMPORTED = True\nfrom agentgym_env_guess import GuessEnv\n")
    make_distribution(site, "agentgym-env-alpha", {"alpha": LAZY_ENV.format(name="alpha", module="alpha_heavy_module")})
    manager = PluginManager(autoload=True, allow=["alpha"])
    registration = manager.catalog("env")["alpha"]
    assert registration.summary == "registered by reference" and not registration.is_loaded
    import sys

    assert "alpha_heavy_module" not in sys.modules  # listing did not import it
    from agentgym_env_guess import GuessEnv

    assert manager.env_class("alpha") is GuessEnv and registration.is_loaded


def test_a_reference_that_does_not_import_names_the_plugin_and_the_error(site):
    make_distribution(site, "agentgym-env-alpha", {"alpha": LAZY_ENV.format(name="alpha", module="no_such_module_qq")})
    make_distribution(site, "agentgym-env-beta", {"beta": LAZY_ENV.format(name="beta", module="not a module")})
    manager = PluginManager(autoload=True, allow=["alpha", "beta"])
    with pytest.raises(PluginError, match=r"plugin 'alpha' .*registered the environment 'alpha' as "
                                          r"'no_such_module_qq:GuessEnv', which failed to import: "
                                          r"ModuleNotFoundError"):
        manager.env_class("alpha")
    with pytest.raises(PluginError, match=r"'not a module:GuessEnv' is not a 'module:attribute' reference"):
        manager.catalog("env")


def test_what_a_registration_by_reference_did_not_declare_is_read_without_importing_it():
    from agentgym_core import hookimpl

    class ByReference:
        @hookimpl
        def agentgym_register_advantage_estimators(self, register):
            register("heavy", "no_such_heavy_module_qq:estimate", min_group_size=2)

    manager = PluginManager(autoload=False)
    manager.register(ByReference(), "by-reference")
    heavy = manager.registration("advantage_estimator", "heavy")
    # --print-config and the recipe checks ask for options; the answer must not import the estimator
    # (and torch with it): a plugin that registers by reference declares everything beside it.
    assert heavy.declared("options") is None and heavy.declared("min_group_size") == 2
    assert not heavy.is_loaded
    with pytest.raises(PluginError, match="failed to import"):
        _ = heavy.obj  # using it is what imports it


def test_looking_up_a_name_imports_the_entry_point_of_that_name_first(site):
    import sys

    for name in ("alpha", "beta", "gamma"):
        make_distribution(site, f"agentgym-env-{name}", {name: RECORDS_IMPORT.format(name=name)})
    manager = PluginManager(autoload=True, allow=["alpha", "beta", "gamma"])
    log = sys.modules.setdefault("imported_plugins_log", type(sys)("imported_plugins_log"))
    log.names = []
    assert manager.env_class("beta") is not None
    assert log.names == ["beta"]  # `agentgym serve beta` does not import the other plugins
    manager.env_class("gamma")
    assert log.names == ["beta", "gamma"]
    with pytest.raises(UnknownNameError, match="Installed environments: alpha, beta, gamma"):
        manager.env_class("delta")  # not an entry point name: every plugin is asked
    assert sorted(log.names) == ["alpha", "beta", "gamma"]
    assert {p.name for p in manager.plugins()} >= {"alpha", "beta", "gamma"}


def test_a_registration_keeps_what_the_plugin_declares_and_refuses_what_its_kind_does_not_take():
    from agentgym_core import hookimpl
    from agentgym_core.plugins import PluginError
    from agentgym_core.schedulers import RoundsConfig

    class WideRounds(RoundsConfig):
        width: int = 3

    def estimate(batch, config):  # never called here
        raise AssertionError

    estimate.options_model = RoundsConfig  # an attribute is no declaration: only register's keywords are read

    class Declaring:
        @hookimpl
        def agentgym_register_advantage_estimators(self, register):
            register("declared", estimate, min_group_size=2, options="agentgym_core.rl.estimator_api:AdvantageConfig")
            register("legacy", estimate)

        @hookimpl
        def agentgym_register_round_schedulers(self, register):
            register("wide", lambda config: None, options=WideRounds)

    manager = PluginManager(autoload=False)
    manager.register(Declaring(), "declaring")
    declared = manager.registration("advantage_estimator", "declared")
    assert declared.spec.min_group_size == 2 and declared.spec.options.endswith(":AdvantageConfig")
    from agentgym_core.rl.estimator_api import AdvantageConfig

    assert declared.declared("options") is AdvantageConfig  # a reference, imported when read
    assert manager.registration("advantage_estimator", "legacy").declared("options") is None
    assert manager.registration("round_scheduler", "wide").declared("options") is WideRounds

    class Misdeclaring:
        @hookimpl
        def agentgym_register_round_schedulers(self, register):
            register("bad", lambda config: None, min_group_size=2)

    wrong = PluginManager(autoload=False)
    wrong.register(Misdeclaring(), "misdeclaring")
    with pytest.raises(PluginError, match=r"round scheduler 'bad' with min_group_size=.*takes only options="):
        wrong.catalog("round_scheduler")


def test_two_distributions_claiming_one_plugin_name_is_an_error_naming_both(site):
    """Neither silently replaces the other (a third-party TextArena package once replaced ours on install)."""
    make_distribution(site / "a", "agentgym-env-alpha", {"alpha": GOOD_ENV.format(name="alpha")})
    make_distribution(site / "b", "alpha-for-agentgym", {"alpha": GOOD_ENV.format(name="alpha")})
    import sys

    sys.path[:0] = [str(site / "a"), str(site / "b")]
    try:
        manager = PluginManager(autoload=True, allow=["alpha"])
        (clash,) = manager.broken_plugins()
        assert clash.name == "alpha" and "agentgym-env-alpha" in clash.package and "alpha-for-agentgym" in clash.package
        assert "two distributions claim the plugin name 'alpha'" in clash.error and "pip uninstall" in clash.error
        with pytest.raises(UnknownNameError, match="two distributions claim the plugin name 'alpha'"):
            manager.get("env", "alpha")
    finally:
        del sys.path[:2]


def test_one_distribution_visible_twice_is_one_plugin(site):
    """An editable install beside a copy of the same distribution: one claim, loaded."""
    make_distribution(site / "a", "agentgym-env-alpha", {"alpha": GOOD_ENV.format(name="alpha")})
    make_distribution(site / "b", "agentgym_env_alpha", {"alpha": GOOD_ENV.format(name="alpha")})  # name spelt as a wheel
    import sys

    sys.path[:0] = [str(site / "a"), str(site / "b")]
    try:
        manager = PluginManager(autoload=True, allow=["alpha"])
        assert manager.broken_plugins() == []
        assert "alpha" in manager.catalog("env")
    finally:
        del sys.path[:2]
