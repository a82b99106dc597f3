"""Recipes and installs that cannot run are refused when the command starts: one line, a non-zero exit,
about a second of CPU, before any model, environment or warm-start work.

Each case runs the real ``agentgym`` command in a process of its own and reads the CPU seconds that
process used (``RUSAGE_CHILDREN``), not the wall clock, so a loaded machine cannot make them flaky.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENTGYM = str(Path(sys.executable).with_name("agentgym"))
CPU_LIMIT_S = 3.0  # the command starts Python, reads the recipe and the plugin records: about a second
CPU_RECIPE = str(ROOT / "examples" / "babyai_grpo_cpu.yaml")
GPU_RECIPE = str(ROOT / "examples" / "babyai_grpo_gpu.yaml")
ENV = {k: v for k, v in os.environ.items() if k != "AGENTGYM_DISABLE_PLUGIN_AUTOLOAD"}  # plugins as a user has them


def refused(*argv: str, env: dict[str, str] | None = None, without: str | None = None) -> str:
    """Run ``agentgym ARGV`` (as if package ``without`` were not installed); assert it exits non-zero with one
    line on stderr, within the CPU limit."""
    command = [AGENTGYM, *argv] if without is None else [
        sys.executable, "-c", f"import sys; sys.modules[{without!r}] = None\n"
        "from agentgym_core.cli import main\nsys.exit(main(sys.argv[1:]))", *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env={**ENV, **(env or {})})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = done.stderr.strip()
    assert done.returncode != 0, done.stdout[-2000:]
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert cpu < CPU_LIMIT_S, f"`agentgym {' '.join(argv)}` took {cpu:.1f} s of CPU to refuse"
    return err


@pytest.fixture
def without_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError:
        return
    pytest.skip("vLLM is installed here")


@pytest.mark.parametrize("print_config", [False, True])
def test_a_missing_vllm_is_named_with_its_install_line_before_the_expert_phase(without_vllm, print_config):
    pytest.importorskip("agentgym_backend_vllm")
    err = refused("train", CPU_RECIPE, "rollout.backend=vllm", *(["--print-config"] if print_config else []))
    assert "needs vLLM, which is not installed" in err
    assert "pip install -e './plugins/agentgym_backend_vllm[engine]'" in err


def test_backend_options_of_another_backend_are_refused_by_name():
    """The GPU recipes' vLLM options under the transformers backend (and the reverse) say which keys are wrong."""
    pytest.importorskip("agentgym_backend_transformers")
    err = refused("train", GPU_RECIPE, "rollout.backend=transformers", "--print-config")
    assert "rollout.backend=transformers does not take these options" in err
    assert "'rollout.backend_options.gpu_sharing'" in err and "kv_cache_dtype" in err  # what it takes instead
    pytest.importorskip("agentgym_backend_vllm")
    err = refused("train", CPU_RECIPE, "rollout.backend=vllm", "rollout.backend_options.mode=server",
                  "rollout.backend_options.urls=[http://127.0.0.1:9]", "--print-config")
    assert "unknown key 'rollout.backend_options.kv_cache_dtype'" in err


@pytest.mark.parametrize("setting", ["runtime.optimizer_state_to_disk=true", "algorithm.critic.enabled=true"])
def test_what_sharded_learners_cannot_do_is_refused_by_the_recipe(setting):
    err = refused("train", CPU_RECIPE, "trainer.learners=2", "runtime.optimizer_state_to_disk=false", setting)
    assert f"trainer.learners=2 does not support {setting.split('=')[0]}" in err


def test_an_estimator_that_needs_a_critic_is_refused_without_one():
    pytest.importorskip("agentgym_estimators")
    err = refused("train", CPU_RECIPE, "algorithm.estimator=gae", "--print-config")
    assert "algorithm.estimator=gae reads critic values" in err


def test_a_plugin_name_two_distributions_claim_is_refused_naming_both(tmp_path):
    """A third-party TextArena adapter that names its entry point like ours: neither loads, and both are named."""
    pytest.importorskip("agentgym_env_textarena")
    info = tmp_path / "textarena_agentgym-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: textarena-agentgym\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[agentgym]\ntextarena = textarena_agentgym_plugin\n")
    (tmp_path / "textarena_agentgym_plugin.py").write_text(textwrap.dedent("""
        from agentgym_core import hookimpl

        @hookimpl
        def agentgym_register_envs(register):
            register("textarena", "textarena_agentgym_plugin:Env")
    """))
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    err = refused("envs", env=env)
    assert "two distributions claim the plugin name 'textarena'" in err
    assert "agentgym-env-textarena" in err and "textarena-agentgym" in err and "pip uninstall" in err
    done = subprocess.run([AGENTGYM, "plugins"], capture_output=True, text=True, timeout=300,
                          env={**ENV, **env})
    assert done.returncode == 1 and "two distributions claim the plugin name 'textarena'" in done.stdout


def test_a_model_this_machine_lacks_is_refused_before_ranks_are_spawned():
    """The multi-GPU page's command where model.path is not there: one line, not a traceback from each rank."""
    err = refused("train", CPU_RECIPE, "model.path=/models/not-here", "trainer.learners=2",
                  "runtime.optimizer_state_to_disk=false")
    assert "cannot find model '/models/not-here'" in err


@pytest.mark.parametrize("print_config", [False, True])
def test_the_ray_launcher_without_ray_is_refused_with_its_install_line(print_config):
    err = refused("train", CPU_RECIPE, "trainer.launcher=ray", *(["--print-config"] if print_config else []),
                  without="ray")
    assert "trainer.launcher=ray needs Ray, which is not installed: pip install './agentgym_core[ray]'" in err
