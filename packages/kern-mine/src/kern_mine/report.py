"""The human report of a ``Mined`` result: pass table, chosen reference with evidence, per-site
fits, pointer classes, replayability summary.  Pure: ``Mined`` in, text out (golden-tested)."""

from __future__ import annotations

from .results import GroupInfo, Mined, PassInfo, SiteInfo

__all__ = ["render_report"]


def _samples(s: list[tuple[int, int]], limit: int = 6) -> str:
    txt = " ".join(f"{t}->{v}" for t, v in s[:limit])
    return txt + (" ..." if len(s) > limit else "")


def _pass_rows(passes: list[PassInfo]) -> list[str]:
    out = ["  pass  req  fam  grp  regular  launches  seq           tokens  extra  missing"]
    for p in passes:
        grp = "-" if p.group is None else str(p.group)
        tok = "-" if p.tokens is None else str(p.tokens)
        out.append(f"  {p.index:4d}  {p.request:3d}  {p.family:3d}  {grp:>3}  {'yes' if p.regular else 'NO':>7}  "
                   f"{p.launches:8d}  {p.first_seq:>5}-{p.last_seq:<6}  {tok:>6}  {p.extra:5d}  {p.missing:7d}")
    return out


def _site(s: SiteInfo, nfwd: int) -> list[str]:
    params = "?" if s.params is None else str(s.params)
    blob = f", {s.blob_params} by-value blob(s)" if s.blob_params else ""
    head = (f"  [{s.index:3d}] {s.kernel} #{s.occurrence}  {s.replay}{blob}  params {params}  "
            f"block {s.block[0]}x{s.block[1]}x{s.block[2]}  present {s.present}/{nfwd}  e.g. seq {s.example_seq}")
    out = [head]
    if s.kernels:
        out.append(f"        kernels (chosen per shape by the library): {', '.join(s.kernels)}")
    consts = []
    for f in s.fits:
        if f.verdict == "constant":
            consts.append(f"{f.what}={f.text}")
            continue
        line = f"        {f.what:9s} {f.verdict:15s} {f.text or '-'}"
        if f.alternatives and f.verdict == "underdetermined":
            line += f"   (also: {f.alternatives})"
        elif f.verdict == "unfittable":
            line += f"   ({f.reason})"
        line += f"   [{_samples(f.samples)}]"
        out.append(line)
    if consts:
        out.append("        constant  " + " ".join(consts))
    for p in s.pointers:
        where = f"param[{p.param}]" + (f"+{p.at}" if p.at else "")
        rng = "-" if p.range_start is None else f"range 0x{p.range_start:x} (+{p.range_size}) offset {p.offset}"
        out.append(f"        ptr {where:12s} {p.klass:8s} {rng}  ({p.distinct} distinct over {p.forwards} forwards, "
                   f"{p.distinct_tokens} token counts)")
    return out


def _group(g: GroupInfo) -> list[str]:
    ref = g.reference
    out = [f"group {g.index} (family {g.family}, {len(g.forwards)} forwards: "
           f"{', '.join(map(str, g.forwards))})"]
    if ref.site is None:
        out.append(f"  tokens: no reference ({ref.reason})")
    else:
        out.append(f"  tokens = grid.x of site {ref.site} {ref.kernel}: {ref.reason}")
        out.append(f"  tokens per forward: {', '.join('-' if t is None else str(t) for t in g.tokens)}")
    if ref.candidates:
        out.append("  candidates:  site  unfittable  underdetermined  complexity  kernel")
        for c in ref.candidates:
            mark = "*" if c.chosen else " "
            out.append(f"             {mark}{c.site:4d}  {c.unfittable:10d}  {c.underdetermined:15d}  "
                       f"{c.complexity:10d}  {c.kernel}")
    out.append("  verdicts: " + ", ".join(f"{k} {v}" for k, v in g.verdicts.items()))
    out.append("  replay:   " + ", ".join(f"{k} {v}" for k, v in g.replay.items()))
    out.append("  sites:")
    for s in g.sites:
        out.extend(_site(s, len(g.forwards)))
    return out


def render_report(m: Mined) -> str:
    """The readable report (deterministic: golden-tested)."""
    o = m.options
    out = [
        f"kern-mine {m.format} v{m.version}: {m.capture}",
        f"launches {m.launches}: {m.not_executed} not executed (stream capture or failed), "
        f"{m.dummy} benchmark repetitions, {m.kept} kept, {m.unassigned} in no forward",
        f"requests {len(m.requests)} (time gap > {o.gap_ms:g} ms)"
        + (f"; mining request {o.request} only" if o.request is not None else ""),
        "",
        "families (forwards end `tail` launches after each occurrence of a once-per-forward anchor kernel,",
        "          and begin at the first start kernel after the previous end)",
    ]
    for f in m.families:
        out.append(f"  {f.index}: anchor {f.anchor}, tail {f.tail}, start {f.start or '-'}, "
                   f"{f.between} launches between forwards, {len(f.forwards)} forwards"
                   + (f", irregular {', '.join(map(str, f.irregular))}" if f.irregular else ""))
    out += ["", "passes"] + _pass_rows(m.passes)
    for g in m.groups:
        out += [""] + _group(g)
    total: dict[str, int] = {}
    for g in m.groups:
        for k, v in g.replay.items():
            total[k] = total.get(k, 0) + v
    out += ["", "replayability: " + (", ".join(f"{k} {v}" for k, v in sorted(total.items())) or "no sites")
            + "  (flat: scalars and pointers; extra: packed extra buffer; aggregate: by-value struct with pointers)"]
    return "\n".join(out) + "\n"
