#!/usr/bin/env bash
# Every check that needs a CUDA device, in one call on a lent GPU (at most 9 minutes: a call may take 10).
#
# Here, from the project's root:   scripts/gpu_bundle.sh              (writes .gpu-bundle/, ignored by git, with the
#                                                                      transformers the backend pins)
# On the device, same root:        bash scripts/gpu_check.sh          (carry .gpu-bundle; results in $OUT)
#
# 1. `pytest -m gpu`: one GPU through the trainer, fast sampling, the library decode engine (CUDA-graph replays
#    compared, the 1.5B shape against plain generate and a forward), bf16 SFT, the estimators on CUDA, and a real
#    NCCL group of world size 1 through the same weight-sync and sharded-checkpoint code several ranks use (full
#    weights, and LoRA's adapter-only gather, adapters-off reference forward and merged checkpoint);
# 2. bench/rollout.py --device cuda: the four decode modes (own engine, library engine, round-sync re-reading,
#    bare generate) on a model of the 1.5B recipe's shape, each beside the card's memory-bound floor; then the own
#    engine with cuDNN's attention allowed (torch's choice on Hopper), the baseline of ruling it out;
# 3. bench/gpu_rl_step.py: two RL steps of the 1.5B recipe on that model (rollout tokens/s, peak memory).
# Each part has its own time limit, so one that hangs leaves the others their time; the exit status is the
# number of parts that failed. The last lines are one table of every figure.
set -uo pipefail
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
bundle=${BUNDLE:-.gpu-bundle}
if [ ! -d "$bundle/whl" ]; then
    echo "no $bundle/whl here: build it with ../shared/gpu/bundle.sh and carry it to the device" >&2
    exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$bundle"/whl/*.whl || exit 2
export PYTHONPATH=/tmp/site
pin=$(grep -o 'transformers==[0-9][0-9.]*' plugins/agentgym_backend_transformers/pyproject.toml | head -n 1)
python3 -c "import transformers, sys; sys.exit(transformers.__version__ != '${pin#transformers==}')" || {
    echo "the bundle lacks $pin (the library decode engine's pin): build it with scripts/gpu_bundle.sh" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
failed=0
part() {  # part NAME SECONDS COMMAND...: run, log to $OUT/NAME.log, count a failure
    local name=$1 limit=$2; shift 2
    echo "== $name (at most ${limit}s)"
    local start=$SECONDS
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -n 15 "$out/$name.log"
    echo "== $name: rc $rc in $((SECONDS - start))s"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
part pytest_gpu 150 python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/agentgym_core/rl/test_nccl_paths.py tests/agentgym_core/rl/test_precision_and_device.py \
    tests/agentgym_backend_transformers/test_fast_sampling.py tests/agentgym_backend_transformers/test_library_engine.py \
    tests/agentgym_core/finetune/test_sft.py tests/agentgym_estimators/test_plugin.py
rollout=(python3 bench/rollout.py --device cuda --model qwen2.5-1.5b-shape --tokenizer "$bundle/tok" --parallel 32
         --max-rounds 4 --max-new-tokens 64)
part rollout_cuda 190 "${rollout[@]}" --modes engine library round-sync-reread generate --out "$out/rollout_cuda.json"
# The own engine with cuDNN's attention allowed while sampling (torch's own choice on Hopper): the baseline.
part rollout_cuda_cudnn 60 "${rollout[@]}" --modes engine --allow-cudnn-attention --out "$out/rollout_cuda_cudnn.json"
# Last: what runs out of the call's 10 minutes first (the parts' limits add up to 9:00, with the install).
part gpu_rl_step 120 python3 bench/gpu_rl_step.py --steps 2 --tokenizer "$bundle/tok" --out "$out/gpu_rl_step.json"
python3 - "$out" <<'SUMMARY' || true
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = []  # (what, tokens/s, floor tokens/s, fraction of floor, engine / attention)
for name in ("rollout_cuda", "rollout_cuda_cudnn"):
    path = out / f"{name}.json"
    if path.exists():
        for mode, r in json.loads(path.read_text())["runs"][0].items():
            if isinstance(r, dict):
                rows.append((f"{name}: {mode}", r["tokens_per_s"], r.get("floor_tokens_per_s"),
                             r.get("fraction_of_floor"), f"{r['decode_engine']} / {r['attention']}"))
step = out / "gpu_rl_step.json"
if step.exists():
    last = json.loads(step.read_text())["steps"][-1]
    rows.append(("gpu_rl_step: rollout", last["sampled_tokens"] / last["time_generation"], None, None, "recipe default"))
print(f"{'what':<38} {'tokens/s':>9} {'floor':>8} {'of floor':>8}  engine / attention")
for what, tps, floor, frac, how in rows:
    print(f"{what:<38} {tps:>9.0f} {floor or float('nan'):>8.0f} {frac or float('nan'):>8.1%}  {how}")
SUMMARY
echo "parts failed: $failed (logs and JSON in $out)"
exit "$failed"
