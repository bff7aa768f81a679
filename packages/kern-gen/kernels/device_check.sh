#!/usr/bin/env bash
# GPU check of kern's own kernels.  From the repository root, with $OUT set:
#   bash packages/kern-gen/kernels/device_check.sh
# Builds the cubins (ptxas report → $OUT/ptxas.txt), runs the GPU tests (log → $OUT/kernels.log,
# per-case errors → $OUT/errors.txt; attention through identity and permuted page tables,
# batches of sequences; the GEMV next to cuBLAS), then the benchmark (→ $OUT/bench.txt, table
# last; paged rows: permuted vs consecutive pages, batched decode; GEMV rows last).
set -u -o pipefail
K=packages/kern-gen/kernels
: "${OUT:?set OUT}"
export PYTHONUNBUFFERED=1
export KERN_KERNELS_CUBINS="$OUT/cubins"
export KERN_KERNELS_REPORT="$OUT/errors.txt"
rm -f "$KERN_KERNELS_REPORT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
nvcc --version | tail -1
python3 "$K/build.py" "$KERN_KERNELS_CUBINS" --verbose 2> "$OUT/ptxas.txt" | tee "$OUT/sha256.txt" || exit 1
grep -E "^# |Used|spill" "$OUT/ptxas.txt"
python3 -m pytest -m gpu "$K/tests" -q -p no:cacheprovider -rfEs 2>&1 | tee "$OUT/kernels.log"
rc=${PIPESTATUS[0]}
echo "pytest exit: $rc"
if [ -f "$KERN_KERNELS_REPORT" ]; then
  sort "$KERN_KERNELS_REPORT" | tail -60
  echo "largest errors (of $(wc -l < "$KERN_KERNELS_REPORT") cases; paged-pool cases: $(grep -c '^paged' "$KERN_KERNELS_REPORT")):"
  sed -n 's/.*max_abs=\([^ ]*\).*/\1 &/p' "$KERN_KERNELS_REPORT" | sort -g | tail -5 | cut -d' ' -f2-
fi
timeout 240 python3 "$K/bench.py" 2>&1 | tee "$OUT/bench.txt"
echo "bench exit: ${PIPESTATUS[0]}; pytest exit: $rc"
exit $rc
