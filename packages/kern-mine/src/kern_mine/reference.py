"""The self-verifying token reference (DESIGN §4, mining step 2) and the fits under it.

Contract: ``tokens`` of a forward is the grid.x of one call site.  Candidates are the sites
of a group whose kernel identity occurs exactly once in the template (runs once per forward),
that every forward of the group has, and whose grid.x takes more than one value.  Every
candidate is tried: all varying series of all sites are fitted with it as ``tokens``, and the
candidate with the fewest ``unfittable + underdetermined`` series wins; ties go to the
simpler fits (sum of expression classes, an unfittable series counting as class 5, worse than
any member of the set: with fewer than ``min_distinct`` token counts every varying series is at
best underdetermined, and the sum alone cannot tell a right reference from one under which
nothing fits), then to smaller token values (``tokens`` rather
than ``mul(tokens, 2)``), then to the earlier site.  Never by name: a wrong reference fails or
underdetermines widely, and the scores say so (they are reported as evidence).
Series that never vary are constant under any reference and are skipped while scoring, and so
are the series of library-call sites whose kernel varies between forwards (the library picks a
kernel, and with it a grid, per shape: their grids are the library's business).
"""

from __future__ import annotations

from collections.abc import Sequence

from .fit import Fit, fit_series
from .results import Candidate, Reference
from .series import Series

__all__ = ["UNFITTABLE_CLASS", "choose_reference", "fit_under"]

UNFITTABLE_CLASS = 5
"""What an unfittable series adds to a candidate's complexity (classes of the set are 0..4)."""


def fit_under(tokens: Sequence[int | None], s: Series, min_distinct: int) -> Fit:
    """Fits one series under per-forward token counts (forwards lacking either are skipped)."""
    ts, vs = [], []
    for t, v in zip(tokens, s.values):
        if t is not None and v is not None:
            ts.append(t)
            vs.append(v)
    if not ts:  # no token reference: only a constant can be stated
        vals = {v for v in s.values if v is not None}
        if len(vals) == 1:
            c = vals.pop()
            return Fit("constant", c, str(c), 0, reason="one value; no token reference")
        return Fit("unfittable", reason="varies, and no token reference")
    return fit_series(tuple(ts), tuple(vs), min_distinct)


def choose_reference(
    site_labels: Sequence[str],
    site_counts: Sequence[int],
    site_series: Sequence[Sequence[Series]],
    min_distinct: int,
    site_mixed: Sequence[bool] | None = None,
) -> tuple[int | None, Reference]:
    """The winning candidate site (or None) and the evidence.

    ``site_counts[i]`` is how often site i's key occurs in the template; ``site_mixed[i]`` says
    that several kernels were seen at site i (a library call whose kernel, and so whose grid,
    the library picks per shape): such sites are neither candidates nor scored."""
    mixed = list(site_mixed) if site_mixed is not None else [False] * len(site_series)
    varying = [(i, s) for i, ss in enumerate(site_series) if not mixed[i] for s in ss if s.varies]
    cands: list[tuple[tuple, Candidate]] = []
    for i, ss in enumerate(site_series):
        gx = ss[0]
        if mixed[i] or site_counts[i] != 1 or any(v is None for v in gx.values) or not gx.varies:
            continue
        tokens = gx.values
        bad = under = cplx = 0
        for _, s in varying:
            f = fit_under(tokens, s, min_distinct)
            if f.verdict == "unfittable":
                bad += 1
            elif f.verdict == "underdetermined":
                under += 1
            if f.verdict == "unfittable":
                cplx += UNFITTABLE_CLASS
            elif f.verdict != "constant":
                cplx += max(f.cls, 0)
        c = Candidate(site=i, kernel=site_labels[i], tokens=list(tokens), unfittable=bad,  # type: ignore[arg-type]
                      underdetermined=under, complexity=cplx)
        key = (bad + under, cplx, sum(tokens), i)  # type: ignore[arg-type]
        cands.append((key, c))
    if not cands:
        return None, Reference(site=None, kernel=None, candidates=[],
                               reason="no once-per-forward kernel whose grid.x varies across these forwards")
    cands.sort(key=lambda kc: kc[0])
    best = cands[0][1]
    best.chosen = True
    runner = cands[1][1] if len(cands) > 1 else None
    why = (f"{best.unfittable} unfittable + {best.underdetermined} underdetermined of {len(varying)} varying series"
           + (f" (only {len(set(best.tokens))} distinct token counts < {min_distinct}: chosen by the "
              "simplest fits)" if len(set(best.tokens)) < min_distinct else "")
           + (f"; next best {runner.kernel}: {runner.unfittable} + {runner.underdetermined}" if runner else
              "; the only candidate"))
    ordered = sorted((c for _, c in cands), key=lambda c: c.site)
    return best.site, Reference(site=best.site, kernel=best.kernel, reason=why, candidates=ordered)
