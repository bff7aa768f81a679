"""``mine()``: a capture in, the mined facts (``results.Mined``) out.  The one entry point the
CLI calls; every step lives in its own module:

    launches.select_launches   executed / benchmark (dummy) / kept, identity ids
    passes.cut_passes          requests, families (anchor kernels), forwards
    sites.group_forwards       templates, majority alignment -> call sites
    series / reference         per-site series, token reference search, fits
    pointers.classify_pointer  stable / changing / mixed pointer slots
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kern_manifest import KernError

from .capture_format import Capture, CaptureFormatError, read_capture
from .launches import identity_label, select_launches
from .passes import cut_passes
from .pointers import classify_pointer
from .reference import choose_reference, fit_under
from .results import (FamilyInfo, GroupInfo, Mined, Options, PassInfo, RequestInfo, SeriesFit,
                      SiteInfo)
from .series import site_pointer_slots, site_series
from .sites import group_forwards, group_sites, launch_keys, replayability

__all__ = ["MineError", "mine"]


class MineError(KernError, ValueError):
    """Input the miner cannot work with (message names the file and, where known, the line)."""


def _readable(capture: Capture | str | Path) -> tuple[Capture, list[str]]:
    """The capture (read if a path) with at least one launch, and the warnings it carries
    (a partial last line dropped); :class:`MineError` naming the file otherwise."""
    if not isinstance(capture, Capture):
        try:
            capture = read_capture(capture)
        except CaptureFormatError as e:
            raise MineError(str(e)) from e
        except OSError as e:
            raise MineError(f"{capture}: {e.strerror or e}") from e
    if not capture.launches:
        raise MineError(f"{capture.launches_path}: no launch records (an empty capture: the "
                        "process launched no kernel, or the capture library was not loaded)")
    warnings = []
    if capture.partial_line is not None:
        warnings.append(f"{capture.launches_path}:{capture.partial_line}: partial last line "
                        "dropped (the capturing process was cut short mid-write)")
    return capture, warnings


def mine(capture: Capture | str | Path, options: Options | None = None) -> Mined:
    """Mines a capture (a ``Capture`` or a path ``read_capture`` accepts)."""
    opts = options or Options()
    capture, warnings = _readable(capture)
    launches = capture.launches
    sel = select_launches(launches, opts.min_repeats)
    kept = sel.kept
    kept_t = [launches[i].t_ns for i in kept]
    kept_ids = [sel.ident[i] for i in kept]
    # Start kernels are recognised by name: a compiled graph's static and dynamic variants
    # (decode and prefill) launch the same-named first kernel from different modules.
    name_of: dict[str, int] = {}
    kept_names = [name_of.setdefault(launches[i].name or "", len(name_of)) for i in kept]
    passes = cut_passes(kept_t, kept_ids, int(opts.gap_ms * 1e6), starts=kept_names)
    if opts.request is not None and not 0 <= opts.request < len(passes.requests):
        raise MineError(f"{capture.launches_path}: --request {opts.request} is out of range "
                        f"(the capture has {len(passes.requests)} request(s))")
    labels = [identity_label(x) for x in sel.identities]

    selected = [f for f in passes.forwards if opts.request is None or f.request == opts.request]
    keys = launch_keys(kept_ids, [launches[i] for i in kept])
    groups = group_forwards(selected, keys, opts.min_match)
    fwd_group: dict[int, int] = {}
    fwd_tokens: dict[int, int] = {}
    fwd_extra: dict[int, tuple[int, int]] = {}
    group_infos = []
    for g in groups:
        sites = group_sites(g, kept, kept_ids)
        site_launches = [[None if i is None else launches[i] for i in s.launches] for s in sites]
        series = [site_series(sl) for sl in site_launches]
        counts = Counter(g.template)
        ref_site, reference = choose_reference(
            [labels[s.ident] for s in sites], [counts[k] for k in g.template], series, opts.min_distinct,
            [len(s.idents) > 1 for s in sites])
        tokens = list(series[ref_site][0].values) if ref_site is not None else [None] * len(g.forwards)
        infos = []
        verdicts: Counter[str] = Counter()
        replay: Counter[str] = Counter()
        for s, sl, ss in zip(sites, site_launches, series):
            present = [x is not None for x in sl]
            example = next(x for x in sl if x is not None)
            fits = []
            for one in ss:
                f = fit_under(tokens, one, opts.min_distinct)
                verdicts[f.verdict] += 1
                fits.append(SeriesFit(what=one.name, verdict=f.verdict, expr=f.expr, text=f.text, cls=f.cls,
                                      alternatives=f.alternatives, reason=f.reason, samples=list(f.samples)))
            kind, blobs = replayability([x for x in sl if x is not None])
            replay[kind] += 1
            ident = sel.identities[s.ident]
            infos.append(SiteInfo(
                index=s.pos, kernel=labels[s.ident], name=ident.name, module=ident.module,
                occurrence=s.occurrence, present=sum(present), replay=kind,  # type: ignore[arg-type]
                kernels=[labels[k] for k in s.idents] if len(s.idents) > 1 else [],
                blob_params=blobs, params=None if example.params is None else len(example.params),
                block=example.block, example_seq=example.seq, fits=fits,
                pointers=[classify_pointer(p, tokens, present) for p in site_pointer_slots(sl)],
            ))
        for k, fi in enumerate(g.forwards):
            fwd_group[fi] = g.index
            if tokens[k] is not None:
                fwd_tokens[fi] = tokens[k]  # type: ignore[assignment]
            fwd_extra[fi] = (g.extra[k], g.missing[k])
        group_infos.append(GroupInfo(index=g.index, family=g.family, forwards=g.forwards, tokens=tokens,
                                     reference=reference, sites=infos, verdicts=dict(sorted(verdicts.items())),
                                     replay=dict(sorted(replay.items()))))

    pass_infos = []
    for f in passes.forwards:
        first, last = launches[kept[f.start]], launches[kept[f.end - 1]]
        ex, mi = fwd_extra.get(f.index, (0, 0))
        pass_infos.append(PassInfo(
            index=f.index, request=f.request, family=f.family, group=fwd_group.get(f.index), regular=f.regular,
            launches=f.end - f.start, first_seq=first.seq, last_seq=last.seq, t0_ns=first.t_ns, t1_ns=last.t_ns,
            tokens=fwd_tokens.get(f.index), extra=ex, missing=mi))
    req_infos = []
    for r, (s, e) in enumerate(passes.requests):
        req_infos.append(RequestInfo(index=r, launches=e - s, t0_ns=kept_t[s], t1_ns=kept_t[e - 1],
                                     forwards=[f.index for f in passes.forwards if f.request == r]))
    fam_infos = []
    for fam in passes.families:
        ident = sel.identities[fam.anchor]
        fam_infos.append(FamilyInfo(
            index=fam.index, anchor=labels[fam.anchor], anchor_name=ident.name, anchor_module=ident.module,
            tail=fam.tail, start=None if fam.start is None else labels[fam.start], between=fam.between,
            forwards=fam.forwards, irregular=[k for k in fam.forwards if not passes.forwards[k].regular]))
    return Mined(capture=str(capture.launches_path), options=opts, launches=len(launches),
                 not_executed=sel.not_executed, dummy=len(sel.dummy), kept=len(kept), unassigned=passes.unassigned,
                 requests=req_infos, passes=pass_infos, families=fam_infos, groups=group_infos,
                 warnings=warnings)
