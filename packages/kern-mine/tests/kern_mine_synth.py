"""A synthetic-capture builder (capture/FORMAT.md, version 1) for kern-mine's tests and benchmark.

It writes what libkerncapture.so would write for an engine-agnostic "transformer-like"
process: requests of one prefill + decode steps, each forward a fixed template of kernels
whose grids and scalars are known functions of the token count, with weights/cache at stable
addresses and activations at addresses that move between forwards.  It also returns the ground
truth (``Truth``) so tests can CHECK the miner; the miner never sees it.

Knobs model the hard parts of real captures: autotuning benchmark runs (period-2 byte-identical
repetitions), launches under stream capture, cache-reset fills between requests, boundary jitter
(the largest host gap sometimes lands one launch later), a "decode graph" whose Triton kernels
are other module instances (``split_decode``), a decoy once-per-forward kernel whose grid.x is a
coarse ``ceil_div(tokens, 64)``, and a kernel whose grid is ``ceil_div(tokens, 4096)`` (a constant
that looks like a fit).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

WEIGHTS = 0x7F00_0000_0000
WEIGHTS_SIZE = 1 << 33
CACHE = 0x7E00_0000_0000
CACHE_SIZE = 1 << 30
ACT = 0x7D00_0000_0000
ACT_SIZE = 1 << 30
FLUSH = 0x7C00_0000_0000


def _sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class TruthForward:
    request: int
    tokens: int
    position: int
    first_seq: int
    last_seq: int
    t0_ns: int
    t1_ns: int


@dataclass
class Truth:
    forwards: list[TruthForward] = field(default_factory=list)
    weight_ptrs: set[int] = field(default_factory=set)
    cache_ptrs: set[int] = field(default_factory=set)
    activation_ptrs: set[int] = field(default_factory=set)
    launches: int = 0
    dummy: int = 0
    capturing: int = 0


def _ptr(value: int, start: int, size: int) -> dict:
    return {"at": 0, "value": value, "range_start": start, "range_size": size, "offset": value - start}


class _Writer:
    def __init__(self, rng: random.Random, spacing_ns: int):
        self.lines: list[str] = []
        self.seq = 0
        self.t = 1_000_000_000
        self.rng = rng
        self.spacing = spacing_ns
        self.modules: dict[str, int] = {}

    def module(self, key: str) -> tuple[str, int]:
        sha = _sha(key)
        if sha not in self.modules:
            self.modules[sha] = len(self.modules) + 1
        return sha, self.modules[sha]

    def launch(self, name: str, mod: str | None, grid, params=None, *, block=(128, 1, 1), extra=False,
               capturing=False, smem=0, gap_ns=None) -> int:
        self.t += self.spacing + self.rng.randrange(self.spacing // 4 + 1) if gap_ns is None else gap_ns
        rec: dict = {"seq": self.seq, "t_ns": self.t, "tid": 7, "api": "cuLaunchKernel", "result": 0, "ctx": 1,
                     "stream": 0, "capturing": capturing, "handle": "function" if mod else "kernel", "name": name}
        if mod is not None:
            sha, mid = self.module(mod)
            rec.update(module=sha, module_id=mid, module_how="load")
        else:
            rec.update(module=None, module_id=None, module_how=None)
        rec.update(grid=list(grid), block=list(block), smem=smem, attrs=[], fattr=None)
        if extra:
            rec.update(api="cuLaunchKernelEx", args="extra", extra_size=64, params=None, raw="00" * 64)
        else:
            rec.update(args="params", params=params or [])
        self.lines.append(json.dumps(rec, separators=(",", ":")))
        self.seq += 1
        return self.seq - 1

    def gap(self, ns: int) -> None:
        self.t += ns


def _p_ptr(off: int, value: int, start: int, size: int) -> dict:
    return {"offset": off, "size": 8, "bytes": value.to_bytes(8, "little").hex(), "ptrs": [_ptr(value, start, size)]}


def _p_int(off: int, value: int, size: int = 4) -> dict:
    return {"offset": off, "size": size, "bytes": value.to_bytes(size, "little").hex()}


def _flat(items: list[tuple[str, int]]) -> list[dict]:
    """Triton-style flat ABI: ('w'|'c'|'a', addr) pointers, ('i', v) i32, then two scratch nulls."""
    out, off = [], 0
    for kind, v in items:
        if kind == "i":
            off = (off + 3) // 4 * 4
            out.append(_p_int(off, v))
            off += 4
        else:
            off = (off + 7) // 8 * 8
            start, size = {"w": (WEIGHTS, WEIGHTS_SIZE), "c": (CACHE, CACHE_SIZE), "a": (ACT, ACT_SIZE)}[kind]
            out.append(_p_ptr(off, v, start, size))
            off += 8
    for _ in range(2):
        off = (off + 7) // 8 * 8
        out.append(_p_int(off, 0, 8))
        off += 8
    return out


def build_capture(
    directory: Path,
    *,
    layers: int = 2,
    requests: tuple[tuple[int, int], ...] = ((7, 2), (34, 2), (85, 2), (175, 2), (600, 2)),
    seed: int = 0,
    autotune: int = 60,
    capturing: int = 3,
    resets: bool = True,
    jitter: float = 0.0,
    split_decode: bool = False,
    decoy: bool = True,
    spacing_ns: int = 20_000,
    forward_gap_ns: int = 600_000,
    request_gap_ns: int = 30_000_000,
) -> Truth:
    """Writes a capture directory and returns its ground truth (see the module docstring)."""
    rng = random.Random(seed)
    w = _Writer(rng, spacing_ns)
    truth = Truth()
    H, FF = 2560, 9728
    wofs = {}

    def weight(name: str) -> int:
        if name not in wofs:
            wofs[name] = WEIGHTS + 4096 * (len(wofs) + 1) * 256
        truth.weight_ptrs.add(wofs[name])
        return wofs[name]

    # Autotuning before the real forwards: benchmark runs of one kernel with a cache flush.
    tune_mod = "tune:triton_red_fused_bench_0"
    for _ in range(autotune):
        w.launch("vectorized_elementwise_kernel_fill", None, (65536, 1, 1), [_p_int(0, 0, 4), _p_ptr(8, FLUSH, FLUSH, 1 << 28)])
        w.launch("triton_red_fused_bench_0", tune_mod, (64, 1, 1), _flat([("a", ACT + 512), ("i", 4096)]))
        truth.dummy += 2
    # Launches recorded into a graph (never executed).
    for _ in range(capturing):
        w.launch("triton_poi_graph_only_0", "graph:poi", (8, 1, 1), _flat([("a", ACT)]), capturing=True)
        truth.capturing += 1
    w.gap(request_gap_ns)

    fcount = 0
    for r, (prompt, decodes) in enumerate(requests):
        if r:
            w.gap(request_gap_ns)
        if resets:
            for layer in range(layers):
                for kv in (0, 1):
                    ptr = CACHE + (layer * 2 + kv) * (1 << 22)
                    w.launch("vectorized_elementwise_kernel_fill", None, (1024, 1, 1), [_p_int(0, 0, 4), _p_ptr(8, ptr, CACHE, CACHE_SIZE)])
            w.gap(forward_gap_ns)
        pos = 0
        for step in range(decodes + 1):
            t = prompt if step == 0 else 1
            static = split_decode and t == 1
            tag = "static:" if static else "dyn:"

            def tri(name: str) -> str:
                return tag + name

            act = ACT + ((fcount % 3) * 7 + (t % 5)) * (1 << 20)  # moves between forwards
            ws = [act + k * (1 << 16) for k in range(4)]
            truth.activation_ptrs.update(ws)
            if step or r or True:
                w.gap(forward_gap_ns)
            first = None
            jit = rng.random() < jitter
            # head: an index kernel (library) + embedding
            s = w.launch("arange_kernel", None, (cdiv(t, 512), 1, 1), [_p_ptr(0, ws[3], ACT, ACT_SIZE), _p_int(8, t, 8)],
                         gap_ns=spacing_ns if jit else None)
            if jit:  # the host gap lands after the arange: it will be cut into the previous forward
                w.gap(forward_gap_ns)
            first = s
            w.launch("triton_poi_embedding_0", tri("embed"), (cdiv(t * 5, 2), 1, 1),
                     _flat([("a", ws[0]), ("w", weight("embed")), ("i", t * H)]))
            for layer in range(layers):
                w.launch("triton_per_fused_rmsnorm_1", tri("norm"), (t, 1, 1),
                         _flat([("a", ws[0]), ("w", weight(f"l{layer}.in_norm")), ("a", ws[1]), ("i", t), ("i", H)]))
                w.launch("nvjet_sm90_tst_128x64_a", None, (cdiv(t, 64) * 6, 1, 1), extra=True, smem=200704)
                w.launch("triton_poi_cache_write_2", tri("cachew"), (cdiv(t * 8, 1), 1, 1),
                         _flat([("a", ws[1]), ("c", CACHE + layer * 2 * (1 << 22)), ("i", pos), ("i", t * 1024)]))
                # attention: a by-value struct with pointers inside
                q, kc = ws[1], CACHE + layer * 2 * (1 << 22)
                blob = (q.to_bytes(8, "little") + kc.to_bytes(8, "little") + (pos + t).to_bytes(4, "little")
                        + bytes(12))
                w.launch("cudnn_sdpa_fprop", None, (cdiv(t, 128), 32, 1), [{
                    "offset": 0, "size": len(blob), "bytes": blob.hex(),
                    "ptrs": [dict(_ptr(q, ACT, ACT_SIZE), at=0), dict(_ptr(kc, CACHE, CACHE_SIZE), at=8)]}])
                w.launch("nvjet_sm90_tst_128x64_a", None, (cdiv(t, 64) * 4, 1, 1), extra=True, smem=200704)
                w.launch("triton_per_fused_rmsnorm_1", tri("norm"), (t, 1, 1),
                         _flat([("a", ws[0]), ("w", weight(f"l{layer}.post_norm")), ("a", ws[1]), ("i", t), ("i", H)]))
                w.launch("nvjet_sm90_tst_128x128_b", None, (cdiv(t, 128) * 76, 1, 1), extra=True, smem=200704)
                w.launch("triton_poi_fused_mul_silu_3", tri("silu"), (cdiv(t * 19, 2), 1, 1),
                         _flat([("a", ws[2]), ("a", ws[1]), ("i", t * FF)]))
                w.launch("nvjet_sm90_tst_128x64_a", None, (cdiv(t, 64) * 4, 1, 1), extra=True, smem=200704)
            w.launch("triton_per_fused_final_norm_4", tri("fnorm"), (t, 1, 1),
                     _flat([("a", ws[0]), ("w", weight("final_norm")), ("a", ws[1]), ("i", t)]))
            if decoy:
                w.launch("triton_red_fused_decoy_5", tri("decoy"), (cdiv(t, 64), 1, 1), _flat([("a", ws[1]), ("i", 64)]))
            w.launch("triton_poi_tiny_6", tri("tiny"), (cdiv(t, 4096), 1, 1), _flat([("a", ws[1]), ("i", 4096)]))
            w.launch("nvjet_sm90_tst_lmhead_c", None, (1187, 1, 1), extra=True, smem=200704)
            last = w.launch("argmax_kernel", None, (1, 1, 1), [_p_ptr(0, ws[2], ACT, ACT_SIZE)])
            rec0 = json.loads(w.lines[first])
            rec1 = json.loads(w.lines[last])
            truth.forwards.append(TruthForward(r, t, pos, first, last, rec0["t_ns"], rec1["t_ns"]))
            pos += t
            fcount += 1
    truth.cache_ptrs = {CACHE + layer * 2 * (1 << 22) for layer in range(layers)}
    truth.launches = len(w.lines)

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "launches.jsonl").write_text("\n".join(w.lines) + "\n")
    (directory / "meta.json").write_text(json.dumps({
        "format": "kern-capture", "version": 1, "pid": 1, "ppid": 0, "clock": "CLOCK_MONOTONIC",
        "start_t_ns": 1_000_000_000, "start_unix_s": 1_790_000_000, "driver_version": 13000,
        "options": {"ptrs": 1, "modules": 0, "max_launches": 0, "filter": None}, "cmdline": ["synthetic"]}))
    (directory / "modules.jsonl").write_text("".join(
        json.dumps({"module_id": mid, "sha256": sha, "size": 64, "t_ns": 1_000_000_000, "ctx": 1}) + "\n"
        for sha, mid in w.modules.items()))
    (directory / "summary.json").write_text(json.dumps({"launches": len(w.lines), "dropped": 0, "end_t_ns": w.t}))
    return truth
