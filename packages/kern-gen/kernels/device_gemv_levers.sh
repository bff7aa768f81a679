#!/usr/bin/env bash
# The decode levers of issue 16 on the GPU machine (GEMV and attention) (no GGUF needed: SmolLM2 runs on random weights of its
# shape).  From the repository root with $OUT set and the wheels carried (.whl, .whl-nvmath:
# docs/device-runs.md); builds and lever folders in /tmp are reused while the machine stays
# warm.  Session 24 ran `tests lever` (H100): the prewait GEMV (gemv_core.cuh ld_w_first)
# became the code; split-K (gemv_splitk.cu, ABI.md 4f; kern-gen --gemm splitk) was slower.
#
#   bash packages/kern-gen/kernels/device_gemv_levers.sh [STEP ...]  (default: tests kbench
#                                                                     lever check)
#   tests   the split-K GPU tests and the plain / bulk-copy GEMV ones (their PDL chains over
#           NaN-poisoned inputs are the race check)                   -> $OUT/tests.log
#   kbench  bench_gemv_splitk.py: µs per GEMV for S x warps against gemv.cu and cuBLAS, both
#           models' shapes, m = 1 and 8, the step GEMMs with the best and kern-gen's picks
#                                                                     -> $OUT/kbench.txt
#   lever   kern-run bench, Qwen3-4B shape: the example against --gemm splitk, PDL off/on,
#           tokens compared                                           -> $OUT/lever.txt
#   check   the Qwen3-4B shape teacher-forced against transformers with --gemm splitk
#           (device_check_qwen3.py)                                   -> $OUT/check/
#   shipped the examples as shipped: every own-kernel GPU test, the Qwen3-4B shape teacher-
#           forced against transformers, the Qwen3 DSpark loop's losslessness, then kern-run
#           bench (SmolLM2 on random weights of its shape, Qwen3) with the compiled
#           transformers baseline                                     -> $OUT/bench.txt
#   adopted session 25's change (the decode attention's old keys before its wait, the qkv GEMV
#           kern_gemv_et_bf16 triggering right after its wait): the GEMV and cluster attention
#           GPU tests, then kern-run bench of the examples against the examples before it
#           (lev_old/, made on the CPU machine: `mkdir lev_old && git archive bac84d2
#           examples/smollm2-135m examples/qwen3-4b | tar -x -C lev_old`; untracked, so it
#           travels with the tree), both models, PDL off/on, tokens compared -> $OUT/adopted*.txt
#   fusenorm  kern-gen --fuse-norm (the RMSNorms split between the GEMVs around them, ABI.md
#           4e; slower in session 20; in session 25 SmolLM2 0.502 vs 0.559 with every GEMV
#           triggering early, Qwen3 slower; since 3269c77 only its qkv GEMV,
#           kern_gemv_rnorm_et_bf16, triggers early) against the examples on both models, PDL
#           off/on, tokens compared                                  -> $OUT/fusenorm.txt
#   (prefetch: session 26's -D KERN_GEMV_PREFETCH=N, run in session 27 and removed: slower)
#   ownnorm  session 26's second lever, kern-gen --own-norm (each decode RMSNorm one launch of
#           rmsnorm.cu, triggering its dependents right after its wait; ABI.md 4g): its GPU
#           tests, then kern-run bench of both models against the examples, PDL off/on, then
#           the Qwen3-4B shape teacher-forced against transformers on the lever (its sum order
#           differs from the captured norms')                       -> $OUT/ownnorm*.txt
#           (run in session 27's c1; since then the qwen3 default, so its Qwen3 lever is the
#           example itself; `kern-gen qwen3 --no-own-norm` gives the captured norms)
#   (attntrig: session 27's -D KERN_ATTN_EARLY_TRIGGER=1 and --gemm tma over the own norms,
#           run in its c2 on an H100; the attention trigger became the code, tma was slower)
#   (l2pf: session 27's --l2-prefetch lever, the o GEMV asking its weights into L2 while the
#           attention runs, run in its c4 and removed: slower, 2.549 vs 2.514 ms/token)
#   (normfirst: session 27's -D KERN_RMSNORM_TRIGGER_FIRST=1, run in its c5 on an H100 and
#           become the code: the own norms let the next GEMV launch before their wait)
#   timeline  probe_gemv_timeline.py on a -D KERN_GEMV_TIMELINE=1 build: where each layer
#           GEMV's time goes in the step's GEMM chain (launch, wait, A round trip, main loop,
#           tail, store, SM imbalance), both models            -> $OUT/timeline.txt
#   attnsplits  probe_attn_cluster.py: the cluster decode attention with 8 (the build), 4 and
#           2 key splits a (row, kv head), correctness against float32 and µs per call at
#           contexts 144-16384, both models' head shapes           -> $OUT/attnsplits.txt
#   (stage: session 28's -D KERN_GEMV_STAGE=1, a 3-step register batch before the wait and S
#           steps of W and A in shared memory by cp.async right after it, so that W streams
#           during A's round trip; bits equal, GPU tests passed; run in its c3 on an H100 and
#           removed: Qwen3 3.344 (S = 1) / 3.458 (S = 3) vs 3.123 ms/token)
#   (siluw: session 28's SiLU GEMV with 2 or 4 warps a block instead of 8 (all 608 blocks
#           resident at once); run in its c4 on an H100 and not adopted: 3.121 / 3.182 vs
#           3.126 ms/token, the GEMMs alone 2.882 / 2.862 vs 2.810)
#   (siluearly: session 28's -D KERN_GEMV_SILU_EARLY=1, the SiLU GEMV triggering right after
#           its wait; run in session 29's c1 on an H100: SmolLM2 0.545 -> 0.525 ms/token,
#           Qwen3 3.118 -> 3.141 (down's wait 3.07 -> 0.77 us, gate_up's tail 4 us longer);
#           the switch became the entry point kern_gemv_silu_et_bf16, see smallearly)
#   smallearly  session 29's rule (kern_gen/llama/pdl_order.py small_early_triggers): every
#           decode GEMV under 16 MiB of weight launches its early-trigger twin (SmolLM2's
#           layer GEMVs; none of Qwen3's).  Its GPU tests (test_gemv_silu_et_gpu.py), then
#           kern-run bench of SmolLM2 against the example from before the rule, PDL off/on,
#           tokens compared (the bits are the same): early = the rule, all = every decode
#           GEMV including the lm_head.  Lever folders made on the CPU machine (untracked):
#             kern-gen llama --out lev_early/llama
#             variant_lever.py lev_early/llama-all --preset llama \
#               --set pdl_order.SMALL_EARLY_BYTES=1099511627776      -> $OUT/smallearly*.txt
#   (stream: session 29's kern-gen --gemm stream, gemv_stream.cu: each layer GEMV's work
#           split evenly over a persistent grid of 2- or 4-block clusters, tiles split between
#           a cluster's blocks summed over DSMEM; run in its c2/c3 on an H100 and removed
#           (commit dc6fc92 has it): correct, but the GEMMs alone 3.516 (66 x 2) / 3.571
#           (30 x 4) / 3.110 (o and down only) vs 2.889 ms; 32 clusters of 4 do not fit at
#           once (30 do), the first run's 4.999 vs 3.120 ms/token)
#   (h2: session 30's 8-column-tile GEMV, gemv_h2.cu (the mma's 16 rows = 8 W rows x two k
#           halves: 320 blocks for Qwen3 o / down instead of 160 on 132 SMs); run in its c1
#           on an H100 and removed (commit 8d0623c has it): GPU tests passed, but Qwen3 with
#           o / down on it 3.133 vs 3.119 ms/token (GEMMs alone 2.862 vs 2.817), the SiLU
#           GEMV on it 3.122 vs 3.118, SmolLM2 0.520 vs 0.515)
#   attntl  probe_attn_timeline.py on a -D KERN_GEMV_TIMELINE=1 -D KERN_ATTN_TIMELINE=1 build:
#           where the decode attention's time goes between the qkv and o GEMVs (Qwen3-4B
#           shape, context 144: wait, q/k rope, key pass, cluster barriers, merge, o's wait),
#           and the same chain without it                      -> $OUT/attn_timeline.txt
#   (fastmerge: session 30's -D KERN_CLUSTER_FAST_MERGE=1, the attention's merge weights once
#           per head and group / rank and the cluster merge spread over the cluster (the same
#           bits: its GPU test against the old build, 12 cases, passed); run in its c16 on an
#           H100 and become the code (commit ba910f5 has the switch): Qwen3 3.202 -> 3.177,
#           SmolLM2 0.489 -> 0.479 ms/token, tokens identical)
#   (ropeprewait: session 30's -D KERN_ATTN_ROPE_PREWAIT=1, the folded attention's norm weights,
#           angles and their cos / sin before its wait; run inline in its c17 on an H100 and
#           removed (commit 746b5e4 has it): bits equal, Qwen3 3.092 -> 3.141 ms/token)
#   pushmerge  session 31's d128 attention lever (attn_decode_cluster.cu: the pushed merge and
#           fitted passes, the d64 code since session 31, measured on d128 only together with
#           rope_core.cuh's -D KERN_ROPE_LOADS_FIRST=1, which was slower): the Qwen3-4B shape
#           with -D KERN_CLUSTER_PUSH_D128=1 alone and with the loads.  Its GPU test against
#           the build's bits and the cluster attention's tests, kern-run bench against the
#           example (PDL off/on, tokens compared), then the attention timeline of the build
#           and of the lever.  Lever folders made on the CPU machine (untracked):
#             variant_lever.py lev_pm/push-qwen3 --preset qwen3 -D KERN_CLUSTER_PUSH_D128=1
#             variant_lever.py lev_pm/loads-qwen3 --preset qwen3 -D KERN_CLUSTER_PUSH_D128=1 \
#               -D KERN_ROPE_LOADS_FIRST=1                           -> $OUT/pm_*.txt
#           (session 31's c1 ran its first form: SmolLM2 0.478 -> 0.463 (pushed merge) ->
#           0.447 (and fitted passes), now the d64 code; the Qwen3-4B shape with all three
#           3.092 -> 3.131; the SiLU GEMV's last wave triggering early, -D
#           KERN_GEMV_LAST_WAVE=1, 3.144 (GEMMs alone 2.870 vs 2.815), removed: commit
#           7335ffa has both)
#   feed    the fed decode steps: packages/kern-run/device_feed.py (what each kind of work
#           between two decode graphs costs; the mailboxes' tokens checked), kern-runtime's
#           GPU tests, kern-run's test_gpu.py (those needing the SmolLM2 GGUF skip without
#           it) and test_fed_gpu.py (the mailboxes' logits bit for bit), the Qwen3 DSpark
#           loop's losslessness                                       -> $OUT/feed_*.txt
#           (session 32's c1 ran it with the positions' one store operation as the A/B:
#           0.442 vs 0.444 ms/token, adopted; session 33's c1 with the mailboxes as the A/B
#           (SmolLM2 0.426 vs 0.440), adopted: the bench's A/B row is now the stream ops)
#   fedcheck  packages/kern-run/device_fed_check.py: the fed steps' logits pass to pass and
#           way to way (stream operations, mailboxes, mailboxes op by op), PDL on and off,
#           then kern-run's test_fed_gpu.py                      -> $OUT/fed_{check,tests}.txt
#   bench   kern-run bench of the examples as shipped (SmolLM2 on random weights of its shape,
#           Qwen3) with the compiled transformers baseline (KERN_BENCH_BASELINE=0: without),
#           no tests                                                  -> $OUT/bench.txt
#   ablate  kern-run bench --ablate on the Qwen3-4B shape example: what each class of kernels
#           (GEMM, attention, rope, own norms) adds to the decode step -> $OUT/ablate.txt
#   (regs: session 34's -D KERN_GEMV_SILU_MAXNREG=96, the SiLU GEMV capped at 96 registers
#           (no spill) so that an 8-warp down block fits beside two of its blocks, alone and
#           with o / down at 8 warps; run in its c2 on an H100 and removed: 3.186 and 3.347 vs
#           3.157 ms/token, GEMMs alone 2.911 / 3.076 vs 2.893; commit 495042b has it)
#   mlpfused  probe_mlp_fused.py: the decode MLP (SiLU GEMV, grid barrier, down GEMV) as one
#           persistent launch (levers/mlp_fused.cu) against the two shipped launches: bits at
#           equal warps, µs an MLP in a 36-layer chain, the step's GEMMs  -> $OUT/mlpfused.txt
#   qkvattn  probe_qkv_attn_fused.py: the Qwen3 decode layer's qkv GEMV and attention as one
#           launch (levers/qkv_attn_fused.cu: the block completing a kv head's tiles attends
#           alone) against the shipped pair: bits and errors vs float32, µs a layer in the
#           qkv -> attention -> o chain at contexts 144 and 1000         -> $OUT/qkvattn.txt
#   triton  probe_gemv_triton.py: issue 16's Triton GEMV (first weight tile before the PDL wait)
#           in 18 tile configurations against gemv.cu and cuBLAS, Qwen3 shapes at m = 1, then
#           the step's GEMMs with each                                 -> $OUT/triton.txt
#   tailab  device_check_dspark.py --target qwen3 --capacity 144 --tail-ab: the DSpark loop's
#           plain tail (the steps the rounds leave short of the capacity) through the mailboxes
#           against stream operations, tokens and rounds compared      -> $OUT/tailab.txt
#   dspark  kern-gen dspark qwen3 --gemm splitk (split-K in verify and the draft too), random
#           draft: plain greedy and the DSpark loops repeated 3 times, tokens compared run to
#           run (the check that found --gemm tma nondeterministic in the multi-row programs,
#           session 15; not in the default steps)                   -> $OUT/dspark/
set -u -o pipefail
: "${OUT:?set OUT}"
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(tests kbench lever check)
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
# the tool returns at most 8 files from $OUT: setup and build logs stay in /tmp
bash packages/kern-run/device_fuse.sh setup > /tmp/kern-setup.log 2>&1
export PYTHONPATH="/tmp/site:$(ls -d packages/*/src | tr '\n' ':')" KERN_CACHE=/tmp/kern-cache
export PYTHONUNBUFFERED=1
KD=packages/kern-gen/kernels
K=$KD/tests
[ -f /tmp/own/gemv_splitk.cubin ] || python3 $KD/build.py /tmp/own > /tmp/kern-build.txt 2>&1 \
  || { cat /tmp/kern-build.txt; exit 1; }
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
      tail -3 "$OUT/tests.log" ;;
    kbench)
      timeout 240 python3 $KD/bench_gemv_splitk.py /tmp/own > "$OUT/kbench.txt" 2>&1 || rc=1
      cat "$OUT/kbench.txt" ;;
    lever)
      lev qwen3-splitk python3 -m kern_gen.cli qwen3 --gemm splitk --out /tmp/lev/qwen3-splitk
      timeout 360 python3 -m kern_run.cli bench --case qwen3 --qwen3 examples/qwen3-4b \
        --lever qwen3:splitk=/tmp/lev/qwen3-splitk --no-baseline > "$OUT/lever.txt" 2>&1 || rc=1
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
    adopted)
      [ -d lev_old/examples ] || { echo "lev_old/examples missing (see the header)"; exit 2; }
      KERN_KERNELS_CUBINS=/tmp/own timeout 150 python3 -m pytest -q -m gpu $K/test_gemv_gpu.py \
        $K/test_attn_cluster_gpu.py $K/test_attn_cluster_rope_gpu.py > "$OUT/adopted_tests.txt" 2>&1 || rc=1
      tail -n 1 "$OUT/adopted_tests.txt"
      timeout 300 python3 -m kern_run.cli bench --case smollm2 --random-weights \
        --lever smollm2:before=lev_old/examples/smollm2-135m --case qwen3 --qwen3 examples/qwen3-4b \
        --lever qwen3:before=lev_old/examples/qwen3-4b --no-baseline > "$OUT/adopted_bench.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/adopted_bench.txt" | grep -v shards | tail -16 ;;
    fusenorm)
      lev llama-fusenorm python3 -m kern_gen.cli llama --fuse-norm --out /tmp/lev/llama-fusenorm
      lev qwen3-fusenorm python3 -m kern_gen.cli qwen3 --fuse-norm --out /tmp/lev/qwen3-fusenorm
      timeout 360 python3 -m kern_run.cli bench --case smollm2 --random-weights \
        --lever smollm2:fusenorm=/tmp/lev/llama-fusenorm --case qwen3 --qwen3 examples/qwen3-4b \
        --lever qwen3:fusenorm=/tmp/lev/qwen3-fusenorm --no-baseline > "$OUT/fusenorm.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/fusenorm.txt" | tail -16 ;;
    timeline)
      [ -f /tmp/own_tl/gemv.cubin ] || python3 $KD/build.py /tmp/own_tl -D KERN_GEMV_TIMELINE=1 \
        > /tmp/kern-build-tl.txt 2>&1 || { tail /tmp/kern-build-tl.txt; rc=1; }
      for model in qwen3 smollm2; do
        timeout 120 python3 $KD/probe_gemv_timeline.py /tmp/own_tl --model $model 2>&1 || rc=1
      done | tee "$OUT/timeline.txt" ;;
    attnsplits)
      KERN_KERNELS_CUBINS=/tmp/own timeout 300 python3 $KD/probe_attn_cluster.py \
        > "$OUT/attnsplits.txt" 2>&1 || rc=1
      tail -16 "$OUT/attnsplits.txt" ;;
    smallearly)
      for d in llama llama-all; do
        [ -f lev_early/$d/manifest.json ] || { echo "lev_early/$d missing (see the header)"; exit 2; }
      done
      KERN_KERNELS_CUBINS=/tmp/own timeout 120 python3 -m pytest -q -m gpu \
        $K/test_gemv_silu_et_gpu.py > "$OUT/smallearly_tests.txt" 2>&1 || rc=1
      echo "silu_et GPU tests: $(tail -n 1 "$OUT/smallearly_tests.txt")"
      timeout 300 python3 -m kern_run.cli bench --case smollm2 --random-weights \
        --lever smollm2:early=lev_early/llama --lever smollm2:all=lev_early/llama-all \
        --no-baseline > "$OUT/smallearly_bench.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/smallearly_bench.txt" | grep -v shards | tail -10 ;;
    attntl)
      [ -f /tmp/own_atl/gemv.cubin ] || python3 $KD/build.py /tmp/own_atl -D KERN_GEMV_TIMELINE=1 \
        -D KERN_ATTN_TIMELINE=1 > /tmp/kern-build-atl.txt 2>&1 || { tail /tmp/kern-build-atl.txt; rc=1; }
      timeout 180 python3 $KD/probe_attn_timeline.py /tmp/own_atl 2>&1 | tee "$OUT/attn_timeline.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1 ;;
    pushmerge)
      for d in push-qwen3 loads-qwen3; do
        [ -f lev_pm/$d/manifest.json ] || { echo "lev_pm/$d missing (see the header)"; exit 2; }
      done
      timeout 300 python3 -m kern_run.cli bench --case qwen3 --qwen3 examples/qwen3-4b \
        --lever qwen3:push=lev_pm/push-qwen3 --lever qwen3:loads=lev_pm/loads-qwen3 \
        --no-baseline > "$OUT/pm_bench.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/pm_bench.txt" | grep -v shards | tail -12
      KERN_KERNELS_CUBINS=/tmp/own timeout 240 python3 -m pytest -q -m gpu \
        $K/test_attn_push_merge_gpu.py $K/test_attn_cluster_gpu.py $K/test_attn_cluster_rope_gpu.py \
        > "$OUT/pm_tests.txt" 2>&1 || rc=1
      echo "attention GPU tests: $(tail -n 1 "$OUT/pm_tests.txt")"
      for v in "" "-D KERN_CLUSTER_PUSH_D128=1"; do
        b=/tmp/own_atl$(echo "$v" | tr -dc 'A-Z0-9' | md5sum | cut -c1-6)
        [ -f $b/gemv.cubin ] || python3 $KD/build.py $b -D KERN_GEMV_TIMELINE=1 \
          -D KERN_ATTN_TIMELINE=1 $v > /tmp/kern-build-pm.txt 2>&1 || { tail /tmp/kern-build-pm.txt; rc=1; }
        echo "== attention timeline, build ${v:-(the build)}"
        timeout 100 python3 $KD/probe_attn_timeline.py $b 2>&1 | tail -4
      done | tee "$OUT/pm_timeline.txt" ;;
    feed)
      timeout 120 python3 packages/kern-run/device_feed.py 2>&1 | grep -v shards \
        > "$OUT/feed_probe.txt" || rc=1
      tail -13 "$OUT/feed_probe.txt"
      timeout 200 python3 -m pytest -q -rfEs -m gpu packages/kern-runtime/tests \
        packages/kern-run/tests/test_gpu.py packages/kern-run/tests/test_fed_gpu.py \
        > "$OUT/feed_tests.txt" 2>&1 || rc=1
      echo "kern-runtime + kern-run GPU tests: $(tail -n 1 "$OUT/feed_tests.txt")"
      mkdir -p /tmp/check
      timeout 200 python3 packages/kern-gen/device_check_dspark.py --target qwen3 --chain \
        --out /tmp/check > "$OUT/feed_dspark.txt" 2>&1 || rc=1
      grep -v "round_log\|Loading\|weights:" "$OUT/feed_dspark.txt" | tail -8 ;;
    bench)   # the examples as shipped, with the compiled transformers baseline (no tests)
      nb=(); [ "${KERN_BENCH_BASELINE:-1}" = 0 ] && nb=(--no-baseline)
      timeout 420 python3 -m kern_run.cli bench --case smollm2 --random-weights --case qwen3 \
        --qwen3 examples/qwen3-4b "${nb[@]}" > "$OUT/bench.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/bench.txt" | grep -v shards | tail -16 ;;
    fedcheck)
      timeout 200 python3 packages/kern-run/device_fed_check.py --no-pdl 2>&1 | grep -v shards \
        | tee "$OUT/fed_check.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
      timeout 200 python3 -m pytest -q -rfEs -m gpu packages/kern-run/tests/test_fed_gpu.py \
        > "$OUT/fed_tests.txt" 2>&1 || rc=1
      echo "test_fed_gpu.py: $(tail -n 1 "$OUT/fed_tests.txt")" ;;
    mlpfused)   # the decode MLP as one persistent launch (levers/mlp_fused.cu) vs the two
      timeout 240 python3 $KD/probe_mlp_fused.py /tmp/own > "$OUT/mlpfused.txt" 2>&1 || rc=1
      grep -v "ptxas\|^    [0-9]* bytes" "$OUT/mlpfused.txt" | tail -24 ;;
    qkvattn)   # the qkv GEMV and the decode attention as one launch vs the shipped pair
      timeout 200 python3 $KD/probe_qkv_attn_fused.py /tmp/own > "$OUT/qkvattn.txt" 2>&1 || rc=1
      grep -v "ptxas\|^    [0-9]* bytes" "$OUT/qkvattn.txt" | tail -22 ;;
    triton)   # issue 16's Triton GEMV probe against gemv.cu and cuBLAS (Qwen3 shapes, m = 1)
      timeout 420 python3 $KD/probe_gemv_triton.py /tmp/own ${KERN_TRITON_ONLY:+--only $KERN_TRITON_ONLY} \
        > "$OUT/triton.txt" 2>&1 || rc=1
      grep -v "^     " "$OUT/triton.txt" | tail -14 ;;
    tailab)   # the DSpark loop's plain tail through the mailboxes against stream operations
      mkdir -p /tmp/check
      timeout 200 python3 packages/kern-gen/device_check_dspark.py --target qwen3 --capacity 144 \
        --tail-ab --out /tmp/check 2>&1 | grep -v "round_log\|Loading\|weights:\|shards" \
        > "$OUT/tailab.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
      tail -12 "$OUT/tailab.txt" ;;
    ablate)
      timeout 200 python3 -m kern_run.cli bench --case qwen3 --qwen3 examples/qwen3-4b \
        --no-baseline --ablate > "$OUT/ablate.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/ablate.txt" | grep -v shards | tail -12 ;;
    ownnorm)
      KERN_KERNELS_CUBINS=/tmp/own timeout 120 python3 -m pytest -q -m gpu $K/test_rmsnorm_gpu.py \
        > "$OUT/ownnorm_tests.txt" 2>&1 || rc=1
      echo "own-norm GPU tests: $(tail -n 1 "$OUT/ownnorm_tests.txt")"
      lev llama-ownnorm python3 -m kern_gen.cli llama --own-norm --out /tmp/lev/llama-ownnorm &
      lev qwen3-ownnorm python3 -m kern_gen.cli qwen3 --own-norm --out /tmp/lev/qwen3-ownnorm &
      wait
      timeout 300 python3 -m kern_run.cli bench --case smollm2 --random-weights \
        --lever smollm2:ownnorm=/tmp/lev/llama-ownnorm --case qwen3 --qwen3 examples/qwen3-4b \
        --lever qwen3:ownnorm=/tmp/lev/qwen3-ownnorm --no-baseline > "$OUT/ownnorm_bench.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/ownnorm_bench.txt" | grep -v shards | tail -16
      mkdir -p "$OUT/ownnorm_check"
      timeout 200 python3 packages/kern-gen/device_check_qwen3.py --example /tmp/lev/qwen3-ownnorm \
        --out "$OUT/ownnorm_check" > "$OUT/ownnorm_check/log.txt" 2>&1 || rc=1
      tail -6 "$OUT/ownnorm_check/log.txt" ;;
    shipped)   # the examples as shipped (after the prewait GEMV became the code, session 24)
      KERN_KERNELS_CUBINS=/tmp/own timeout 200 python3 -m pytest -q -m gpu $K \
        > "$OUT/kernels_gpu.log" 2>&1 || rc=1
      tail -2 "$OUT/kernels_gpu.log"
      mkdir -p /tmp/check     # its JSON reports stay there; the logs come back
      timeout 200 python3 packages/kern-gen/device_check_qwen3.py --example examples/qwen3-4b \
        --out /tmp/check > "$OUT/check_qwen3.txt" 2>&1 || rc=1
      tail -8 "$OUT/check_qwen3.txt"
      timeout 200 python3 packages/kern-gen/device_check_dspark.py --target qwen3 --chain \
        --out /tmp/check > "$OUT/check_dspark.txt" 2>&1 || rc=1
      grep -v "round_log\|Loading\|weights:" "$OUT/check_dspark.txt" | tail -12
      nb=(); [ "${KERN_BENCH_BASELINE:-1}" = 0 ] && nb=(--no-baseline)
      timeout 420 python3 -m kern_run.cli bench --case smollm2 --random-weights --case qwen3 \
        --qwen3 examples/qwen3-4b "${nb[@]}" > "$OUT/bench.txt" 2>&1 || rc=1
      grep -v "^bench:" "$OUT/bench.txt" | tail -14 ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
exit $rc
