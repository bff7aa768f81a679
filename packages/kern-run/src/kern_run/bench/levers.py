"""``kern-run bench --lever CASE:LABEL=DIR``: what each decode lever of issue 16 contributes,
measured in the same process as the case's main manifest.

Every manifest of a case (the main one, then each ``--lever`` folder of that case, in the
order given: e.g. other kernels, ``kern-gen --gemm gemv``) is loaded twice, with programmatic
dependent launch off and on (``Runtime.load(pdl=...)``), on the same weights.  Each load
runs the same greedy generation (the bench's token prompt, ``steps`` tokens) and times it
as :func:`.kern_decode` does.  Rows: decode ms/token, the change against the row before,
and whether the tokens are identical to those of the main manifest with PDL off (the first
index where they differ otherwise).  For PDL, µs saved per launch boundary = (ms off − ms
on) / the decode program's steps marked ``pdl``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import KernRunError

CASES = ("smollm2", "qwen3")


def parse_levers(specs: list[str]) -> dict[str, list[tuple[str, Path]]]:
    """``CASE:LABEL=DIR`` each -> {case: [(label, dir)]}, refusing a bad one by its text."""
    out: dict[str, list[tuple[str, Path]]] = {}
    for s in specs:
        case, _, rest = s.partition(":")
        label, _, d = rest.partition("=")
        if case not in CASES or not label or not d:
            raise KernRunError(f"--lever `{s}`: expected CASE:LABEL=DIR with CASE one of "
                               f"{', '.join(CASES)}")
        p = Path(d)
        if not (p / "manifest.json").is_file():
            raise KernRunError(f"--lever `{s}`: `{p}` has no manifest.json")
        out.setdefault(case, []).append((label, p))
    return out


def pdl_steps(manifest: Path, program: str = "decode") -> int:
    """Launches of ``program`` whose step says ``pdl``."""
    from kern_manifest import read
    m = read(manifest)
    return sum(1 for d in m.programs[program].dispatches
               for s in m.kernels[d.kernel].impl.steps if s.pdl is True)


def lever_rows(rep: Any, case: str, variants: list[tuple[str, Path]], weights: list[Path], *,
               load_cap: int | None, steps: int, reps: int, gpu: int, info: Any,
               limit: int | None) -> list[dict]:
    """Measure every (variant, PDL off/on) and add the rows; returns the raw numbers."""
    from kern_runtime import Runtime

    from ..generate import generate
    from . import kern_decode

    prompt = [(17 * i + 5) % (info.vocab or 1000) for i in range(16)]
    fixed = info.context is not None
    ref: list[int] | None = None
    prev: float | None = None
    out: list[dict] = []
    for label, d in variants:
        n_pdl = pdl_steps(d / "manifest.json")
        ms_off = None
        for pdl in (False, True):
            with Runtime.load(d / "manifest.json", d / "kernels", weights=weights,
                              capacity=load_cap, device=gpu, progress=None, pdl=pdl) as rt:
                toks = generate(rt, prompt, steps=steps, chunk=info.max_tokens,
                                max_tokens=info.max_tokens, vocab=info.vocab,
                                capacity=limit, fixed_context=fixed).tokens
                t = kern_decode(rt, info.max_tokens, steps=steps, reps=reps,
                                vocab=info.vocab, capacity=limit, fixed=fixed)
            ms = t["decode_ms"]
            ref = toks if ref is None else ref
            same = _same(toks, ref)
            delta = "" if prev is None else f"{ms - prev:+.3f} ms vs the row before"
            note = same
            if pdl and ms_off is not None and n_pdl:
                note += f"; PDL saves {1000 * (ms_off - ms) / n_pdl:.2f} µs × {n_pdl} steps"
            rep.add(case, f"lever {label}, PDL {'on' if pdl else 'off'}: decode ms/token",
                    f"{ms:.3f}", delta, note=note)
            out.append({"label": label, "pdl": pdl, "decode_ms": ms,
                        "gpu_ms": t["decode_gpu_ms"], "pdl_steps": n_pdl,
                        "tokens_identical": toks == ref})
            ms_off = ms if not pdl else ms_off
            prev = ms
    return out


def _same(toks: list[int], ref: list[int]) -> str:
    if toks == ref:
        return "tokens identical"
    i = next((i for i, (a, b) in enumerate(zip(toks, ref)) if a != b), min(len(toks), len(ref)))
    return f"tokens differ from index {i}"
