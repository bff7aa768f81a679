#!/usr/bin/env bash
# Issue 16's kernel evidence on the GPU machine, in one call (< 6 minutes). From the
# repository root with $OUT set and msgspec, nvmath-python and cuda-core importable:
#   build the own cubins (ptxas report), the GPU tests of every own kernel (the GEMV against
#   an fp64 reference next to cuBLAS, the one-launch decode attention against the former two
#   launches), the GEMV rows and the one-vs-two-launch rows of the kernels bench, then
#   kern-runtime's GPU tests (cuBLASLt through nvmath-python's bindings, PDL launches).
# Logs under $OUT; the two bench tables last.
set -u -o pipefail
K=packages/kern-gen/kernels
: "${OUT:?set OUT}"
export PYTHONUNBUFFERED=1 KERN_KERNELS_CUBINS="$OUT/cubins" KERN_KERNELS_REPORT="$OUT/errors.txt"
python3 -c "import time; t = time.perf_counter(); import nvmath.bindings.cublasLt as lt; print('nvmath', lt.get_version(), 'import %.2f s' % (time.perf_counter() - t))"
python3 "$K/build.py" "$KERN_KERNELS_CUBINS" --verbose 2> "$OUT/ptxas.txt" | tee "$OUT/sha256.txt" || exit 1
grep -E "^# |Used|spill" "$OUT/ptxas.txt" | grep -B1 -E "gemv|attn_decode|Used" | head -40
timeout 240 python3 -m pytest -m gpu "$K/tests" -q -p no:cacheprovider -rfEs 2>&1 | tail -25 | tee "$OUT/kernels.log"
rc=${PIPESTATUS[0]}
[ -f "$KERN_KERNELS_REPORT" ] && sort "$KERN_KERNELS_REPORT" | grep -i gemv | tail -40 > "$OUT/gemv_errors.txt"
PYTHONPATH="$PYTHONPATH:$(ls -d packages/*/src | tr '\n' ':')" timeout 90 python3 -m pytest -m gpu packages/kern-runtime -q -p no:cacheprovider -o addopts="--import-mode=importlib -ra" 2>&1 | tail -4 | tee "$OUT/runtime_gpu.log"
timeout 120 python3 "$K/bench.py" --only gemv 2>&1 | tee "$OUT/bench_gemv.txt" | sed -n '/== summary/,$p'
timeout 120 python3 "$K/bench.py" --only attn 2>&1 | tee "$OUT/bench_attn.txt" | sed -n '/== decode: one launch/,$p'
echo "kernels pytest exit: $rc"
exit $rc
