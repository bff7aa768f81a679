#!/usr/bin/env bash
# Issue 13 on the GPU machine (~4 min): the own kernels' GPU tests (the decode attention's
# split count following the context included), kern-runtime's GPU tests, then
# device_long_context.py (Qwen3-4B shape at capacities 2048 / 3000 / 32768 vs transformers,
# prefill and decode speed at long context). From the repository root, $OUT set, .whl carried.
set -uo pipefail
: "${OUT:?set OUT to a writable folder}"
for w in .whl/*.whl; do
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$w" 2>/dev/null
done
export PYTHONPATH="/tmp/site:packages/kern-manifest/src:packages/kern-runtime/src:packages/kern-weights/src:packages/kern-gen/src:packages/kern-mine/src:packages/kern-run/src"
export PYTHONUNBUFFERED=1
rc=0
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider packages/kern-gen/kernels/tests 2>&1 \
  | tail -15 | tee "$OUT/kernels_gpu.log"; [ "${PIPESTATUS[0]}" -ne 0 ] && rc=1
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider packages/kern-runtime/tests 2>&1 \
  | tail -6 | tee "$OUT/runtime_gpu.log"; [ "${PIPESTATUS[0]}" -ne 0 ] && rc=1
timeout 330 python3 packages/kern-gen/device_long_context.py --out "$OUT" "$@" 2>&1 \
  | tee "$OUT/long_context.log" | tail -70; [ "${PIPESTATUS[0]}" -ne 0 ] && rc=1
echo "device_long_context.sh: exit $rc"
exit $rc
