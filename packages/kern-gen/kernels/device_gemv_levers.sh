#!/usr/bin/env bash
# Two GEMV levers of session 23 on the GPU machine (no GGUF needed for the Qwen3-4B shape;
# the four default steps are estimated at ~11 minutes: run `tests kbench`, then `lever
# check` in a second call while the machine is warm; builds and levers in /tmp are reused).  From the repository root with $OUT set and the wheels carried
# (.whl, .whl-nvmath: docs/device-runs.md):
#   splitk   the split-K GEMV (gemv_splitk.cu, ABI.md 4f; kern-gen --gemm splitk);
#   prewait  gemv.cu's first W batch really issued before griddepcontrol.wait
#            (gemv_core.cuh KERN_GEMV_PREWAIT=1: a variant build; same arithmetic, so the
#            tokens must be identical to the examples').
#
#   bash packages/kern-gen/kernels/device_gemv_levers.sh [STEP ...]  (default: tests kbench
#                                                                     lever check)
#   tests   the split-K GPU tests and the plain / bulk-copy GEMV ones (default build), then
#           the plain and split-K ones again on the prewait build (their PDL chains over
#           NaN-poisoned inputs are the race check)                   -> $OUT/tests*.log
#   kbench  bench_gemv_splitk.py: µs per GEMV for S x warps against gemv.cu and cuBLAS, both
#           models' shapes, m = 1 and 8, the step GEMMs with the best and kern-gen's picks;
#           then the same picks on the prewait build                  -> $OUT/kbench*.txt
#   lever   kern-run bench, Qwen3-4B shape and SmolLM2 (random weights of its shape, no GGUF):
#           the examples against --gemm splitk and the prewait build, PDL off/on, tokens
#           compared                                                  -> $OUT/lever.txt
#   check   the Qwen3-4B shape teacher-forced against transformers with --gemm splitk
#           (device_check_qwen3.py)                                   -> $OUT/check/
#   dspark  kern-gen dspark qwen3 --gemm splitk (split-K in verify and the draft too), random
#           draft: plain greedy and the DSpark loops repeated 3 times, tokens compared run to
#           run (the check that found --gemm tma nondeterministic in the multi-row programs,
#           session 15; not in the default steps)                   -> $OUT/dspark/
set -u -o pipefail
: "${OUT:?set OUT}"
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(tests kbench lever check)
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
bash packages/kern-run/device_fuse.sh setup > "$OUT/setup.log" 2>&1
export PYTHONPATH="/tmp/site:$(ls -d packages/*/src | tr '\n' ':')" KERN_CACHE=/tmp/kern-cache
export PYTHONUNBUFFERED=1
KD=packages/kern-gen/kernels
K=$KD/tests
PW=KERN_GEMV_PREWAIT=1
[ -f /tmp/own/gemv_splitk.cubin ] || python3 $KD/build.py /tmp/own > "$OUT/build.txt" 2>&1 \
  || { cat "$OUT/build.txt"; exit 1; }
[ -f /tmp/own_pw/gemv.cubin ] || python3 $KD/build.py /tmp/own_pw -D $PW > "$OUT/build_pw.txt" 2>&1 \
  || { cat "$OUT/build_pw.txt"; exit 1; }
lev() {   # lever folder $1 from kern-gen args $2.. (generated once per machine)
  local dir=/tmp/lev/$1; shift
  [ -f $dir/manifest.json ] || "$@" > /dev/null || rc=1
}
rc=0
for step in "${STEPS[@]}"; do
  case $step in
    tests)
      KERN_KERNELS_CUBINS=/tmp/own KERN_KERNELS_REPORT="$OUT/report.txt" timeout 240 \
        python3 -m pytest -q -m gpu $K/test_gemv_splitk_gpu.py $K/test_gemv_gpu.py \
        $K/test_gemv_tma_gpu.py > "$OUT/tests.log" 2>&1 || rc=1
      tail -3 "$OUT/tests.log"
      KERN_KERNELS_CUBINS=/tmp/own_pw timeout 200 python3 -m pytest -q -m gpu \
        $K/test_gemv_gpu.py $K/test_gemv_splitk_gpu.py > "$OUT/tests_pw.log" 2>&1 || rc=1
      tail -3 "$OUT/tests_pw.log" ;;
    kbench)
      timeout 240 python3 $KD/bench_gemv_splitk.py /tmp/own > "$OUT/kbench.txt" 2>&1 || rc=1
      cat "$OUT/kbench.txt"
      timeout 120 python3 $KD/bench_gemv_splitk.py /tmp/own_pw --steps-only > "$OUT/kbench_pw.txt" 2>&1 || rc=1
      echo "== prewait build"; cat "$OUT/kbench_pw.txt" ;;
    lever)
      lev qwen3-splitk python3 -m kern_gen.cli qwen3 --gemm splitk --out /tmp/lev/qwen3-splitk
      lev qwen3-prewait python3 $KD/variant_lever.py /tmp/lev/qwen3-prewait --preset qwen3 -D $PW
      cases=(--case qwen3 --qwen3 examples/qwen3-4b --lever qwen3:splitk=/tmp/lev/qwen3-splitk
             --lever qwen3:prewait=/tmp/lev/qwen3-prewait)
      # SmolLM2 with seeded random weights of its shape (kern-run bench --random-weights):
      # speed rows need no GGUF
      lev llama-prewait python3 $KD/variant_lever.py /tmp/lev/llama-prewait --preset llama -D $PW
      cases+=(--case smollm2 --random-weights --lever smollm2:prewait=/tmp/lev/llama-prewait)
      timeout 360 python3 -m kern_run.cli bench "${cases[@]}" --no-baseline > "$OUT/lever.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/lever.txt" | tail -30 ;;
    check)
      lev qwen3-splitk python3 -m kern_gen.cli qwen3 --gemm splitk --out /tmp/lev/qwen3-splitk
      mkdir -p "$OUT/check"
      timeout 300 python3 packages/kern-gen/device_check_qwen3.py --example /tmp/lev/qwen3-splitk \
        --out "$OUT/check" > "$OUT/check/log.txt" 2>&1 || rc=1
      tail -12 "$OUT/check/log.txt" ;;
    dspark)
      lev qwen3-dspark-splitk python3 -m kern_gen.cli dspark qwen3 --gemm splitk \
        --draft examples/qwen3-4b-dspark/dspark.json --out /tmp/lev/qwen3-dspark-splitk
      mkdir -p "$OUT/dspark"
      timeout 400 python3 packages/kern-gen/device_check_dspark.py --target qwen3 \
        --example /tmp/lev/qwen3-dspark-splitk --chain --repeat 3 --steps 64 --out "$OUT/dspark" \
        > "$OUT/dspark/log.txt" 2>&1 || rc=1
      tail -15 "$OUT/dspark/log.txt" ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
exit $rc
