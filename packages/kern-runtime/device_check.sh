#!/usr/bin/env bash
# kern-runtime on the GPU machine: the GPU tests, then the benchmark. < 6 minutes.
#
# Run from the repository root with $OUT set and msgspec and nvmath-python (with cuda-core)
# importable (PYTHONPATH), e.g.
#   pip install --no-index --no-deps --target /tmp/site .whl/msgspec-*.whl \
#     .whl/nvmath_python-*.whl .whl/cuda_core-*.whl
#   export PYTHONPATH=/tmp/site; bash packages/kern-runtime/device_check.sh
# Logs: $OUT/gpu_tests.log, $OUT/bench.log, $OUT/bench.json, $OUT/bench.txt; a table last.
set -uo pipefail
: "${OUT:?set OUT to a writable folder}"
PKG=packages/kern-runtime
export PYTHONPATH="packages/kern-manifest/src:packages/kern-weights/src:$PKG/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
{ nvidia-smi -L; python3 -c "import cuda.bindings, cuda.pathfinder, numpy, safetensors, msgspec, nvmath; print('cuda-bindings', cuda.bindings.__version__, 'cuda-pathfinder', cuda.pathfinder.__version__, 'nvmath-python', nvmath.__version__, 'numpy', numpy.__version__, 'safetensors', safetensors.__version__, 'msgspec', msgspec.__version__)"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== GPU tests =="
timeout 200 python3 -m pytest -m gpu "$PKG" -q -s -p no:cacheprovider -o addopts="--import-mode=importlib -ra" 2>&1 | tee "$OUT/gpu_tests.log"
rc_tests=${PIPESTATUS[0]}

echo "== benchmark =="
timeout 200 python3 "$PKG/bench/bench_runtime.py" --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
rc_bench=${PIPESTATUS[0]}

echo
echo "== device check summary =="
echo "gpu tests (exit $rc_tests): $(grep -E '[0-9]+ (passed|failed|error)' "$OUT/gpu_tests.log" | tail -1)"
grep -E '^m=' "$OUT/gpu_tests.log" || true
[ -f "$OUT/bench.txt" ] && cat "$OUT/bench.txt"
echo "benchmark exit $rc_bench"
exit $(( rc_tests != 0 || rc_bench != 0 ))
