#!/usr/bin/env bash
# device_run.sh - everything capture/ needs from the GPU machine, in one command.
#
#   OUT=/some/dir bash capture/device_run.sh        (from the repository root)
#
# Phases (each bounded by `timeout`, each run even if an earlier one failed, all inside a
# global budget of KCAP_BUDGET_S seconds, default 500; KCAP_PHASES selects, see below):
#   1 build      make -C capture (the injection library)
#   2 gt         ground-truth program: build, run captured, gt_check.py -> PASS/FAIL table
#   3 qwen3      Qwen3-4B-shaped random model under torch.compile, captured (cold caches)
#   4 smollm2    SmolLM2-135M-Instruct (GGUF) captured; skipped with a line if the file is absent
#   5 slowdown   the smaller model again, uncaptured then captured, both on warm caches
#   6 trim       trimmed fixtures -> $OUT/<name>.tar.xz (each <= 16 MiB)
#   7 summary    printed last
# Inputs: optional wheels in .whl/ (gguf, accelerate, psutil, msgspec) installed to /tmp/site
# unless already importable; the GGUF at .carry/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf or in
# parts .carry/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.part-* (joined here).
set -u
: "${OUT:?set OUT to the output directory}"
mkdir -p "$OUT"
ROOT=$(pwd)
WORK=${KCAP_WORK:-/tmp/kcap-run}
BUDGET=${KCAP_BUDGET_S:-500}
T0=$(date +%s)
DEADLINE=$((T0 + BUDGET))
rm -rf "$WORK"
mkdir -p "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
CUDA=${CUDA:-$(ls -d /usr/local/cuda-13.0 /usr/local/cuda 2>/dev/null | head -1)}
LIB=$ROOT/capture/libkerncapture.so
SUMMARY=$WORK/summary.tsv
: > "$SUMMARY"
echo "device_run: start $(date -u +%FT%TZ) root=$ROOT cuda=$CUDA budget=${BUDGET}s"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true
set -x

# phase NAME LIMIT_S CMD... : runs CMD under timeout, bounded by the global deadline
# (keeping RESERVE seconds for trim + summary); records rc and seconds.
RESERVE=45
phase() {
  local name=$1 limit=$2
  shift 2
  local now left s rc
  now=$(date +%s)
  left=$((DEADLINE - RESERVE - now))
  if [ "$left" -lt 15 ]; then
    echo "PHASE $name SKIPPED: global budget exhausted"
    printf '%s\tskipped\t0\n' "$name" >> "$SUMMARY"
    return 99
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  s=$(date +%s)
  echo "=== PHASE $name (limit ${limit}s) ==="
  timeout -k 10 "$limit" "$@"
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - s))" >> "$SUMMARY"
  echo "=== PHASE $name rc=$rc $(($(date +%s) - s))s ==="
  return $rc
}

# --- inputs ---------------------------------------------------------------------------------
# KCAP_SKIP_WHEELS=1: the wheels are already in /tmp/site (two runs side by side must not
# install into one folder at once).
if [ -z "${KCAP_SKIP_WHEELS:-}" ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  for w in .whl/*.whl; do # one by one: a wheel for another platform must not block the rest
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$w" || true
  done
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import gguf, accelerate; print("gguf+accelerate importable")' || echo "WARN: gguf/accelerate not importable (SmolLM2 load will fail)"
GGUF=$ROOT/.carry/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$GGUF" ]; then
  # Sent in parts (one transfer carries at most 64 MiB): join them in name order.
  PARTS=$(ls "$GGUF".part* "$ROOT"/.carry/smollm2/gguf.part* 2>/dev/null | sort)
  if [ -n "$PARTS" ]; then
    mkdir -p "$WORK/gguf"
    cat $PARTS > "$WORK/gguf/SmolLM2-135M-Instruct.Q4_1.gguf" && GGUF=$WORK/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
  fi
fi
# Expected: 98362432 bytes, sha256 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
[ -f "$GGUF" ] && ls -l "$GGUF" && sha256sum "$GGUF"
# KCAP_PHASES (space-separated): build gt qwen3 smollm2 slowdown package.  The default leaves
# out slowdown (one more cold ~3 min run of the small model) to stay near 7 minutes.
KCAP_PHASES=${KCAP_PHASES:-build gt qwen3 smollm2 package}
want() { [[ " $KCAP_PHASES " == *" $1 "* ]]; }

# --- 1 build --------------------------------------------------------------------------------
want build && phase build 120 make -C capture CUDA="$CUDA"
ls -l "$LIB" && nm -D --defined-only "$LIB" | grep InitializeInjection && ldd "$LIB"

cap_env() { # cap_env DIR CMD... : run CMD with the injection library loaded
  local dir=$1
  shift
  env CUDA_INJECTION64_PATH="$LIB" KERN_CAPTURE_DIR="$dir" "$@"
}

# --- 2 ground truth -------------------------------------------------------------------------
gt_all() {
  local g=$WORK/gt
  mkdir -p "$g/rt"
  "$CUDA/bin/nvcc" -arch=sm_90 -cubin -o "$g/modA.cubin" capture/gt/gt_mod.cu &&
    "$CUDA/bin/nvcc" -arch=sm_90 -cubin -DGT_VARIANT_B -o "$g/modB.cubin" capture/gt/gt_mod.cu &&
    "$CUDA/bin/nvcc" -arch=sm_90 -o "$g/gt" capture/gt/gt.cu -L"$CUDA/lib64/stubs" -lcuda -ldl || return 1
  (cd "$g/rt" && "$CUDA/bin/cuobjdump" -xelf all ../gt) || true
  ls -l "$g" "$g/rt"
  "$g/gt" "$g/modA.cubin" "$g/modB.cubin" "$g/expected_nocap.jsonl" || echo "gt without capture FAILED"
  cap_env "$g/cap" "$g/gt" "$g/modA.cubin" "$g/modB.cubin" "$g/expected.jsonl" || echo "gt with capture FAILED rc=$?"
  ls -lR "$g/cap" | head -30
  python3 capture/gt/gt_check.py "$g/cap" "$g/expected.jsonl" "$g/modA.cubin" "$g/modB.cubin" "$g"/rt/*.cubin |
    tee "$g/gt_check.txt"
  return "${PIPESTATUS[0]}"
}
want gt && phase gt 120 bash -c "$(declare -f gt_all cap_env); WORK=$WORK CUDA=$CUDA LIB=$LIB; gt_all"

# --- 3/4 model captures ---------------------------------------------------------------------
# Every model run gets its own empty Inductor/Triton cache: each run compiles and autotunes
# from scratch (cold), so a captured and an uncaptured run of one model do the same work.
export PROMPTS=${KCAP_PROMPTS:-1,7,34,85,175,600} DECODE=${KCAP_DECODE:-3} ATTN=${KCAP_ATTN:-flex_attention}
export WORK LIB
run_model() { # run_model NAME CAPDIR|- ARGS... : wall seconds -> $WORK/NAME.wall, sidecar -> $WORK/NAME.sidecar.json
  local name=$1 cap=$2 s rc
  shift 2
  # Inductor's generated code goes with the capture as evidence (the generator's tests read
  # the writers' store arithmetic and bounds from it): TORCH_LOGS=output_code, one file per run.
  local envs=(TORCHINDUCTOR_CACHE_DIR="$WORK/inductor-$name" TRITON_CACHE_DIR="$WORK/triton-$name"
              TORCH_LOGS=output_code TORCH_LOGS_OUT="$WORK/$name.inductor.log")
  [ "$cap" != "-" ] && envs+=(CUDA_INJECTION64_PATH="$LIB" KERN_CAPTURE_DIR="$cap")
  s=$(date +%s.%N)
  env "${envs[@]}" python3 capture/models/hf_capture.py --prompts "$PROMPTS" --decode "$DECODE" --attn "$ATTN" \
    --sidecar "$WORK/$name.sidecar.json" "$@"
  rc=$?
  python3 -c "print(round($(date +%s.%N) - $s, 2))" > "$WORK/$name.wall"
  return $rc
}
export -f run_model

want qwen3 && phase qwen3 ${KCAP_LIMIT_QWEN3:-300} bash -c 'run_model qwen3 $WORK/cap-qwen3 --model qwen3-4b-random'

if [ -f "$GGUF" ]; then
  export SMALL="--model smollm2 --gguf $GGUF" SMALLNAME=smollm2
  want smollm2 && phase smollm2 ${KCAP_LIMIT_SMOLLM2:-210} bash -c 'run_model smollm2 $WORK/cap-smollm2 $SMALL'
else
  echo "SKIP smollm2: GGUF file not found at $GGUF (slowdown measured on qwen3-tiny instead)"
  printf 'smollm2\tskipped(no gguf)\t0\n' >> "$SUMMARY"
  export SMALL="--model qwen3-tiny" SMALLNAME=qwen3-tiny
  want slowdown && phase qwen3-tiny 150 bash -c 'run_model qwen3-tiny $WORK/cap-tiny $SMALL'
fi

# --- 5 slowdown: the same workload uncaptured, cold caches too ------------------------------
want slowdown && phase uncaptured 210 bash -c 'run_model uncaptured - $SMALL'

# --- 6 trim + package -----------------------------------------------------------------------
set +x
RESERVE=0
package() { # package NAME CAPDIR SIDECAR [INDUCTOR_LOG]
  local n=$1 cap=$2 side=$3 fx=$WORK/fx
  [ -d "$cap" ] || { echo "no capture for $n"; return 1; }
  local sc=()
  [ -f "$side" ] && sc=(--sidecar "$side")
  python3 capture/trim.py "$cap" "$fx/$n" "${sc[@]}" || return 1
  if [ -f "$4" ]; then
    mkdir -p "$fx/$n/inductor" && xz -T0 -6 -c "$4" > "$fx/$n/inductor/inductor_code.log.xz"
  fi
  for p in "$cap"/pid-*; do python3 capture/trim.py --stats "$p" > "$fx/$n/stats-$(basename "$p").json" 2>/dev/null; done
  tar -C "$fx" -cf - "$n" | xz -T0 -6 > "$OUT/$n.tar.xz"
  if [ "$(stat -c %s "$OUT/$n.tar.xz")" -gt 16000000 ]; then
    echo "$n: over 16 MB, dropping cubins"
    rm -rf "$fx/$n/modules"
    tar -C "$fx" -cf - "$n" | xz -T0 -6 > "$OUT/$n.tar.xz"
  fi
  ls -l "$OUT/$n.tar.xz"
}
want package && phase package_qwen3 60 bash -c "$(declare -f package); WORK=$WORK OUT=$OUT; package qwen3-4b-random $WORK/cap-qwen3 $WORK/qwen3.sidecar.json $WORK/qwen3.inductor.log"
[ -f "$GGUF" ] && want package && phase package_smollm2 60 bash -c "$(declare -f package); WORK=$WORK OUT=$OUT; package smollm2 $WORK/cap-smollm2 $WORK/smollm2.sidecar.json $WORK/smollm2.inductor.log"
if [ -d "$WORK/gt" ]; then
  tar -C "$WORK" --exclude=gt/gt -cf - gt | xz -T0 -6 > "$OUT/gt.tar.xz"
fi
tar -C "$WORK" -cf - $(cd "$WORK" && ls *.wall uncaptured.sidecar.json 2>/dev/null) 2>/dev/null | xz -6 > "$OUT/slowdown.tar.xz"

# --- 7 summary (last) -----------------------------------------------------------------------
python3 - "$WORK" "$SUMMARY" "$SMALLNAME" <<'PYEOF' | tee "$OUT/summary.txt"
import json, pathlib, sys
work, summary, small = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
print("\n================ device_run summary ================")
print(f"{'phase':<18}{'rc':<18}{'seconds':>8}")
for line in open(summary):
    name, rc, sec = line.rstrip("\n").split("\t")
    print(f"{name:<18}{rc:<18}{sec:>8}")
chk = work / "gt" / "gt_check.txt"
if chk.exists():
    lines = chk.read_text().splitlines()
    for l in lines:
        print("  ", l[:200])
def wall(n):
    p = work / f"{n}.wall"
    return float(p.read_text()) if p.exists() else None
def fwd_ms(n):
    p = work / f"{n}.sidecar.json"
    if not p.exists():
        return None
    s = json.loads(p.read_text())
    f = [x for r in s["requests"] for x in r["forwards"]]
    return sum(x["t1_ns"] - x["t0_ns"] for x in f) / 1e6, len(f)
rcs = {l.split("\t")[0]: l.split("\t")[1] for l in open(summary)}
ok = rcs.get("uncaptured") == "0" and rcs.get(small) == "0"
u, c = (wall("uncaptured"), wall(small)) if ok else (None, None)
if u and c:
    print(f"slowdown ({small}, cold caches both): wall {c:.1f}s captured / {u:.1f}s uncaptured = {c / u:.2f}x")
fu, fc = (fwd_ms("uncaptured"), fwd_ms(small)) if ok else (None, None)
if fu and fc:
    print(f"  measured forwards: {fc[0]:.1f} ms captured / {fu[0]:.1f} ms uncaptured over {fu[1]} forwards = {fc[0] / fu[0]:.2f}x")
for n in ("qwen3", "smollm2"):
    w = wall(n)
    fx = work / "fx" / ("qwen3-4b-random" if n == "qwen3" else n) / "trim.json"
    if fx.exists():
        t = json.loads(fx.read_text())
        fu_, kp = t["full"], t["kept"]
        print(f"{n}: wall {w}s; full {fu_['launches']} launches ({fu_['distinct_kernels']} kernels, abi {fu_['distinct_kernels_by_abi']}, "
              f"no-module {fu_['launches_without_module']}); kept {kp['launches']} (abi {kp['by_abi']}), cubins kept {len(t['modules_kept'])}")
    else:
        print(f"{n}: wall {w}s; no trimmed capture")
PYEOF
ls -l "$OUT"
echo "device_run: end after $(($(date +%s) - T0))s"
