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


#: KV capacity of each lever's runtime (tokens): every (variant, PDL) is loaded at once, and
#: the issue's decode targets are for contexts of at most 1k.
LEVER_CAPACITY = 2048


def generation(info: Any) -> tuple[list[int], int | None, bool]:
    """(prompt, KV capacity, fixed context) of the greedy generations that the lever rows
    and the ablation (:mod:`.ablate`) run: the bench's 16-token id prompt, at most
    :data:`LEVER_CAPACITY` positions unless the manifest's context is fixed."""
    prompt = [(17 * i + 5) % (info.vocab or 1000) for i in range(16)]
    fixed = info.context is not None
    cap = None if fixed else min(LEVER_CAPACITY, info.position_limit or LEVER_CAPACITY)
    return prompt, cap, fixed


def lever_rows(rep: Any, case: str, variants: list[tuple[str, Path]], weights: list[Path], *,
               steps: int, reps: int, gpu: int, info: Any) -> list[dict]:
    """Measure every (variant, PDL off/on) and add the rows; returns the raw numbers.

    All runtimes are loaded first, then timed in ``reps`` interleaved rounds (one greedy
    generation each per round), so that clock and thermal drift fall on every row alike."""
    import contextlib
    import statistics

    from kern_runtime import Runtime

    from ..generate import generate

    prompt, cap, fixed = generation(info)
    runs = [(label, d, pdl) for label, d in variants for pdl in (False, True)]
    with contextlib.ExitStack() as stack:
        rts = [stack.enter_context(Runtime.load(d / "manifest.json", d / "kernels",
                                                weights=weights, capacity=cap, device=gpu,
                                                progress=None, pdl=pdl))
               for _, d, pdl in runs]

        def gen(rt):
            return generate(rt, prompt, steps=steps, chunk=info.max_tokens,
                            max_tokens=info.max_tokens, vocab=info.vocab, capacity=cap,
                            fixed_context=fixed)
        toks = [gen(rt).tokens for rt in rts]           # also the warm-up (graphs captured)
        ms: list[list[float]] = [[] for _ in rts]
        for _ in range(reps):
            for i, rt in enumerate(rts):
                r = gen(rt)
                ms[i].append(1000 * r.decode_s / r.decode_tokens)
    out: list[dict] = []
    prev = off = None
    for i, (label, d, pdl) in enumerate(runs):
        med = statistics.median(ms[i])
        note = _same(toks[i], toks[0])
        n_pdl = pdl_steps(d / "manifest.json")
        if pdl and off is not None and n_pdl:
            note += f"; PDL saves {1000 * (off - med) / n_pdl:.2f} µs × {n_pdl} steps"
        rep.add(case, f"lever {label}, PDL {'on' if pdl else 'off'}: decode ms/token",
                f"{med:.3f}", "" if prev is None else f"{med - prev:+.3f} ms vs the row before",
                note=note)
        out.append({"label": label, "pdl": pdl, "decode_ms": med, "samples_ms": ms[i],
                    "pdl_steps": n_pdl, "tokens_identical": toks[i] == toks[0]})
        prev, off = med, (med if not pdl else off)
    return out


def _same(toks: list[int], ref: list[int]) -> str:
    if toks == ref:
        return "tokens identical"
    i = next((i for i, (a, b) in enumerate(zip(toks, ref)) if a != b), min(len(toks), len(ref)))
    return f"tokens differ from index {i}"
