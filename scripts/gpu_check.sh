#!/usr/bin/env bash
# Every check that needs a CUDA device, in one call on a lent GPU (at most 9.8 minutes: a call may take 10).
#
# Here, from the project's root:   ../shared/gpu/bundle.sh            (writes .gpu-bundle/, ignored by git)
# On the device, same root:        bash scripts/gpu_check.sh          (carry .gpu-bundle; results in $OUT)
#
# 1. `pytest -m gpu`: one GPU through the trainer, fast sampling, bf16 SFT, the estimators on CUDA, and a
#    real NCCL group of world size 1 through the same weight-sync and sharded-checkpoint code several ranks use
#    (full weights, and LoRA's adapter-only gather, adapters-off reference forward and merged checkpoint);
# 2. bench/rollout.py --device cuda: the rollout engine against re-reading every prompt each turn on a model of
#    the 1.5B recipe's shape, sampling without cuDNN's attention (the backend's default) and with it (torch's
#    choice on Hopper);
# 3. bench/gpu_rl_step.py: two RL steps of the 1.5B recipe on that model (rollout tokens/s, peak memory).
# Each part has its own time limit, so one that hangs leaves the others their time; the exit status is the
# number of parts that failed.
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
part pytest_gpu 140 python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/agentgym_core/rl/test_nccl_paths.py tests/agentgym_core/rl/test_precision_and_device.py \
    tests/agentgym_backend_transformers/test_fast_sampling.py tests/agentgym_core/finetune/test_sft.py \
    tests/agentgym_estimators/test_plugin.py
rollout=(python3 bench/rollout.py --device cuda --model qwen2.5-1.5b-shape --tokenizer "$bundle/tok" --parallel 32
         --max-rounds 6 --max-new-tokens 96 --modes engine round-sync-reread)
part rollout_cuda 120 "${rollout[@]}" --out "$out/rollout_cuda.json"
# The same rollouts with cuDNN's attention allowed while sampling (torch's own choice on Hopper): the baseline.
part rollout_cuda_cudnn 120 "${rollout[@]}" --allow-cudnn-attention --out "$out/rollout_cuda_cudnn.json"
# Last: what runs out of the call's 10 minutes first (the parts' limits add up to 9:40, with the install).
part gpu_rl_step 200 python3 bench/gpu_rl_step.py --steps 2 --tokenizer "$bundle/tok" --out "$out/gpu_rl_step.json"
python3 - "$out" <<'SUMMARY' || true
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("rollout_cuda", "rollout_cuda_cudnn"):
    path = out / f"{name}.json"
    if path.exists():
        run = json.loads(path.read_text())["runs"][0]
        modes = {m: r["tokens_per_s"] for m, r in run.items() if isinstance(r, dict)}
        print(f"{name}: " + ", ".join(f"{m} {v:.0f} tokens/s" for m, v in modes.items()))
step = out / "gpu_rl_step.json"
if step.exists():
    last = json.loads(step.read_text())["steps"][-1]
    print(f"gpu_rl_step: last step's rollout {last['sampled_tokens'] / last['time_generation']:.0f} tokens/s")
SUMMARY
echo "parts failed: $failed (logs and JSON in $out)"
exit "$failed"
