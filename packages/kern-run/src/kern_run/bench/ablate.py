"""``kern-run bench --ablate``: what each class of kernels adds to the decode step's span.

Why not the profiler's busy time (:mod:`.profile`): under programmatic dependent launch a
kernel starts while its predecessor still runs and waits on it, so its busy time counts the
wait; a step's busy time is larger than its span (issue 16: Qwen3-4B shape 4021 µs busy in a
3616 µs span).  The measure here is the span itself: the decode step's GPU time, back to
back, with one class of dispatches left out of the ``decode`` program, against the whole
step, in the same process and interleaved.  The difference is what that class costs the
critical path, i.e. the most that fusing or removing it could give.

A step without a class computes wrong values (a GEMV then reads whatever its input buffer
held): only its time means anything, and the GEMVs' and the attention's time does not
depend on the values they read.  Every manifest here is made for the measurement and
verified like any other (:func:`without`); the other programs are unchanged, so the prompt
is prefilled as usual before the decode steps are timed.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from kern_manifest import Kernel, Manifest, encode, parse_param_type

from ..errors import KernRunError

GEMM, ATTENTION, ROPE, NORM, CAPTURED, OTHER = (
    "GEMM", "attention", "rope + KV write", "RMSNorm (own)", "captured (Inductor)", "other own")
CLASSES = (GEMM, ATTENTION, ROPE, NORM, CAPTURED)
"""The classes left out one at a time (:data:`OTHER` — embedding, argmax — stays: the
decode loop reads the argmax)."""


def kernel_class(kernel: Kernel) -> str:
    """The class of a manifest kernel, by its implementation's first step: cuBLASLt externs
    and kern's GEMVs (``kern_gemv…``) are GEMMs, ``kern_attn…`` attention, ``kern_rope…``
    rope and the K/V cache writes, ``kern_rmsnorm…`` the own norms, any other symbol not
    named ``kern_…`` a captured kernel (Inductor's Triton), the remaining own kernels
    :data:`OTHER`."""
    steps = kernel.impl.steps
    if all(s.is_extern for s in steps):
        return GEMM
    sym = steps[0].symbol
    for prefix, cls in (("kern_gemv", GEMM), ("kern_attn", ATTENTION), ("kern_rope", ROPE),
                        ("kern_rmsnorm", NORM)):
        if sym.startswith(prefix):
            return cls
    return OTHER if sym.startswith("kern_") else CAPTURED


def class_counts(m: Manifest, program: str = "decode") -> dict[str, int]:
    """Dispatches of ``program`` per class (classes with none are absent)."""
    if program not in m.programs:
        raise KernRunError(f"manifest `{m.meta.model}` has no program `{program}`")
    out: dict[str, int] = {}
    for d in m.programs[program].dispatches:
        c = kernel_class(m.kernels[d.kernel])
        out[c] = out.get(c, 0) + 1
    return out


def without(m: Manifest, cls: str, program: str = "decode") -> dict[str, Any]:
    """``m`` (as a JSON object) with ``program``'s dispatches of class ``cls`` left out.

    A buffer a kept dispatch of ``program`` reads before any kept dispatch writes it (its
    writer was left out) becomes ``carry`` if a kept dispatch writes it later or another
    program writes it, else ``input`` (both count as written at the start of a program;
    neither changes a kernel's time);
    kernels and buffers nothing uses any more are dropped (the verifier refuses unused
    ones)."""
    if program not in m.programs:
        raise KernRunError(f"manifest `{m.meta.model}` has no program `{program}`")
    doc = json.loads(encode(m))
    disp = m.programs[program].dispatches
    keep = [i for i, d in enumerate(disp) if kernel_class(m.kernels[d.kernel]) != cls]
    if len(keep) == len(disp):
        raise KernRunError(f"program `{program}` of `{m.meta.model}` has no {cls} dispatches")
    kept = [disp[i] for i in keep]
    others = [d for name, p in m.programs.items() if name != program for d in p.dispatches]
    writes_it = {a.buf for d in (*others, *kept)
                 for t, a in zip(m.kernels[d.kernel].params, d.args)
                 if a.kind == "buf" and parse_param_type(t).direction != "in"}
    written: set[str] = set()
    for d in kept:
        for t, a in zip(m.kernels[d.kernel].params, d.args):
            if a.kind != "buf":
                continue
            pt, b = parse_param_type(t), a.buf
            if pt.reads and b not in written and m.buffers[b].cls in ("workspace", "output"):
                entry = doc["buffers"][b]
                entry["class"] = "carry" if b in writes_it else "input"
                entry.pop("domain", None)
            if pt.direction != "in":
                written.add(b)  # type: ignore[arg-type]
    doc["programs"][program]["dispatches"] = [doc["programs"][program]["dispatches"][i]
                                              for i in keep]
    _prune(doc)
    doc["meta"]["model"] = f"{m.meta.model} ({program} without {cls})"
    return doc


def _prune(doc: dict[str, Any]) -> None:
    """Drop the kernels no program dispatches and the buffers no dispatch names (an unused
    output or carry stays: E0703 would say it is never written, and none of them is)."""
    kernels, bufs = set(), set()
    for p in doc["programs"].values():
        for d in p["dispatches"]:
            kernels.add(d["kernel"])
            bufs.update(a["buf"] for a in d["args"] if "buf" in a)
    doc["kernels"] = {k: v for k, v in doc["kernels"].items() if k in kernels}
    doc["buffers"] = {b: v for b, v in doc["buffers"].items()
                      if b in bufs or v["class"] in ("output", "carry")}


def ablation_rows(rep: Any, case: str, manifest: Path, kernels: Path, weights: list[Path], *,
                  steps: int, reps: int, gpu: int, info: Any) -> list[dict]:
    """Load the whole manifest and one without each class present in its ``decode``;
    prefill the bench's 16-token prompt and generate ``steps`` tokens in each (the context
    the decode steps then run at), then time ``reps`` interleaved rounds of back-to-back
    decode steps.  Adds a row per class and returns the raw numbers."""
    import contextlib

    from kern_manifest import read
    from kern_runtime import Runtime

    from ..generate import generate
    from . import kern_graph_ms
    from .levers import generation

    m = read(manifest)
    counts = class_counts(m)
    classes = [c for c in CLASSES if c in counts]
    prompt, cap, fixed = generation(info)
    with tempfile.TemporaryDirectory(prefix="kern-run-ablate-") as tmp, \
            contextlib.ExitStack() as stack:
        paths = [manifest]
        for c in classes:
            p = Path(tmp) / f"{len(paths)}.json"
            p.write_text(json.dumps(without(m, c)))
            paths.append(p)
        rts = [stack.enter_context(Runtime.load(p, kernels, weights=weights, capacity=cap,
                                                device=gpu, progress=None)) for p in paths]
        for rt in rts:
            generate(rt, prompt, steps=steps, chunk=info.max_tokens, max_tokens=info.max_tokens,
                     vocab=info.vocab, capacity=cap, fixed_context=fixed)
        ms: list[list[float]] = [[] for _ in rts]
        for _ in range(reps):
            for i, rt in enumerate(rts):
                ms[i].append(kern_graph_ms(rt, "decode", {"tokens": 1}, k=max(50, steps)))
    whole = statistics.median(ms[0])
    rep.add(case, "ablation: decode GPU ms/step, whole step", f"{whole:.3f}",
            note=f"{sum(counts.values())} dispatches; context {len(prompt) + steps}")
    out = [{"class": None, "dispatches": sum(counts.values()), "gpu_ms": whole,
            "samples_ms": ms[0]}]
    for c, samples in zip(classes, ms[1:]):
        med, n = statistics.median(samples), counts[c]
        rep.add(case, f"ablation: without {c} ({n} dispatches)", f"{med:.3f}",
                f"{whole - med:+.3f} ms of the step",
                note=f"{1000 * (whole - med) / n:.2f} µs a dispatch")
        out.append({"class": c, "dispatches": n, "gpu_ms": med, "samples_ms": samples,
                    "saves_ms": whole - med})
    return out
