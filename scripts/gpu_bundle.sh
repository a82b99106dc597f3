#!/usr/bin/env bash
# The GPU bundle (../shared/gpu/bundle.sh) with the transformers the backend pins for its library decode engine
# (plugins/agentgym_backend_transformers/pyproject.toml, extra "library"), and the versions of the packages that
# transformers checks at import, since the GPU image's own are older. From the project's root:
#
#   scripts/gpu_bundle.sh [OUT_DIR]          # then carry OUT_DIR (default .gpu-bundle) to scripts/gpu_check.sh
set -euo pipefail
pin=$(grep -o 'transformers==[0-9][0-9.]*' plugins/agentgym_backend_transformers/pyproject.toml | head -n 1)
[ -n "$pin" ] || { echo "no transformers==X pin in the backend's pyproject.toml" >&2; exit 2; }
# What that transformers requires at import (tokenizers 0.23, huggingface-hub >= 1.31, safetensors >= 0.8,
# regex >= 2025.10.22), and what huggingface-hub 1.31 imports; pure-Python or manylinux wheels for Python 3.12.
BUNDLE_EXTRA="$pin tokenizers==0.23.3 huggingface-hub==1.31.0 safetensors==0.8.0 regex==2026.11.19 hf-xet==1.8.0 \
click==8.5.1 ${BUNDLE_EXTRA:-}" exec ../shared/gpu/bundle.sh "$@"
