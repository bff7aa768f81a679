#!/usr/bin/env bash
# kern-gen on the GPU machine: the generated SmolLM2-135M manifest through kern-runtime vs
# transformers on the same GGUF weights, in bf16 and in fp32 (the exit code judges kern's
# error vs fp32 against HF-bf16's own: see device_check.py's docstring). < 4 minutes.
#
# Run from the repository root with $OUT set, .carry/smollm2/gguf.part00 + gguf.part01
# carried, and msgspec + gguf importable (wheels: set WHEELS to a folder holding them, e.g.
# .whl; they are installed with --no-index into /tmp/site). Prints a table last; the full
# log is $OUT/kern_gen_device.log, the numbers $OUT/device_check.json.
#
# `device_check.sh --model qwen3 [args]`: the Qwen3-4B-shaped example instead
# (device_check_qwen3.py: seeded random weights built as the capture built them, exported
# through an ~8 GB HF checkpoint under /tmp; no GGUF; < 5 minutes). Log
# $OUT/kern_gen_device_qwen3.log, numbers $OUT/device_check_qwen3.json.
set -uo pipefail
: "${OUT:?set OUT to a writable folder}"
MODEL=smollm2
if [ "${1:-}" = "--model" ]; then MODEL="${2:?--model smollm2|qwen3}"; shift 2; fi
WHEELS="${WHEELS:-.whl}"
if ! python3 -c "import msgspec, gguf, nvmath" 2>/dev/null; then
  pip install --quiet --no-index --no-deps --target /tmp/site "$WHEELS"/msgspec-*.whl "$WHEELS"/gguf-*.whl \
    "$WHEELS"/nvmath_python-*.whl "$WHEELS"/cuda_core-*.whl 2>&1 | tail -2
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="packages/kern-manifest/src:packages/kern-runtime/src:packages/kern-weights/src:packages/kern-gen/src:packages/kern-run/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ "$MODEL" = qwen3 ]; then
  timeout 290 python3 packages/kern-gen/device_check_qwen3.py --out "$OUT" "$@" 2>&1 \
    | tee "$OUT/kern_gen_device_qwen3.log"
  exit "${PIPESTATUS[0]}"
elif [ "$MODEL" != smollm2 ]; then
  echo "unknown --model $MODEL (smollm2, qwen3)" >&2; exit 2
fi
GGUF=/tmp/smollm2-135m.gguf
cat .carry/smollm2/gguf.part00 .carry/smollm2/gguf.part01 > "$GGUF" || exit 1
sha256sum "$GGUF"
timeout 230 python3 packages/kern-gen/device_check.py --example examples/smollm2-135m \
  --gguf "$GGUF" --out "$OUT" "$@" 2>&1 | tee "$OUT/kern_gen_device.log"
exit "${PIPESTATUS[0]}"
