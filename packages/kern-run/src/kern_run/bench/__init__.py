"""``kern-run bench``: the benchmark of issue 7, kern and the baseline measured in one run.

Cases (each optional, each reported as table rows; a failing part prints its error in the
table and the rest still runs):

- ``smollm2``: the bundled default (or ``--manifest``/``--kernels``/``--weights``): decode
  ms/token (target ≤ 0.35 ms), GPU time per back-to-back decode graph, host time per step;
  with ``--random-weights`` the same example with seeded random weights of its shape, no
  GGUF needed (:mod:`.random_weights`);
- ``qwen3``: a Qwen3-4B-shape manifest (``--qwen3 DIR`` holding ``manifest.json``,
  ``kernels/``, optional ``export-plan.json``) with seeded random weights (an HF checkpoint made by
  transformers, exported with ``kern_weights``; cached in ``$KERN_CACHE``): decode ms/token
  next to the same step's GEMMs alone (:mod:`.gemm_only`; target: the rest adds ≤ 12 %), and
  prefill throughput of a 2048-token prompt (target ≥ 40k tokens/s);
- baseline (unless ``--no-baseline``): transformers + ``torch.compile(mode="reduce-overhead",
  fullgraph=True)`` around a one-token decode step on a ``StaticCache``, same shapes, same GPU,
  one host read of the argmax per token like kern's loop (:mod:`.torch_side`), each in a child
  process started after that case's kern measurements, so neither side inherits the other's
  process state;
- ``--ablate``: per case, the decode step's GPU time without each class of kernels (GEMMs,
  attention, rope, the captured kernels) against the whole step, i.e. what each class costs
  the critical path (:mod:`.ablate`);
- ``--profile``: per case, where the GPU time of one decode step goes (kernels by category,
  busy vs gaps; :mod:`.profile`), recorded in a child process that loads the runtime again
  (the profiler leaves CUPTI overhead in its process), after every other measurement
  (printed to stderr, summary rows at the end of the table, ``data[case]["profile"]`` in
  --json).

torch and transformers are imported only in the child processes of :mod:`.torch_side` (on
the GPU machine); nothing in kern-run's caller path needs them."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import KernRunError
from .ablate import ablation_rows
from .levers import lever_rows
from .timing import kern_decode, kern_graph_ms, kern_prefill  # noqa: F401
from .spec import (PEER_PROMPTS, SPEC_TARGETS, smollm2_spec, spec_rows,  # noqa: F401
                   spec_set_rows, verify_cost)
from .torch_side import (baseline_in_child, checkpoint_in_child, lookup_in_child,
                         profile_in_child)

#: Shapes of the baseline models (transformers configs), from ../shared/facts/h200.md.
QWEN3_4B = dict(model_type="qwen3", hidden_size=2560, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                intermediate_size=9728, vocab_size=151936, tie_word_embeddings=True,
                rms_norm_eps=1e-6, rope_theta=1_000_000.0, max_position_embeddings=40960)
TARGETS = {"smollm2_decode_ms": 0.35, "qwen3_overhead": 0.12, "qwen3_prefill_tok_s": 40_000}


@dataclass
class Row:
    case: str
    what: str
    kern: str = ""
    reference: str = ""
    target: str = ""
    note: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, *a: str, **k: str) -> None:
        self.rows.append(Row(*a, **k))
        sys.stderr.write(f"bench: {' | '.join(x for x in (a + tuple(k.values())) if x)}\n")

    def table(self) -> str:
        head = Row("case", "measurement", "kern", "reference", "target", "note")
        rows = [head] + self.rows
        cols = ["case", "what", "kern", "reference", "target", "note"]
        w = {c: max(len(getattr(r, c)) for r in rows) for c in cols}
        lines = ["  ".join(getattr(r, c).ljust(w[c]) for c in cols).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w[c] for c in cols))
        return "\n".join(lines)


def feed_row(rep: Report, case: str, d: dict) -> None:
    """The A/B row of :func:`kern_decode`: fed steps by stream operations (the way before
    session 33) vs through mailboxes (the default)."""
    rep.add(case, "decode ms/token, fed by stream operations", f"{d['decode_ms_streamops']:.3f}",
            note=f"A/B: {d['decode_ms']:.3f} through mailboxes (the default); tokens "
                 f"{'identical' if d['streamops_same_tokens'] else 'DIFFER'}")


def gemms_alone_ms(manifest: Path, kernels: Path, weights: list[Path], gpu: int) -> float:
    from kern_manifest import read
    from kern_runtime import Runtime
    from .gemm_only import decode_symbols, gemm_only
    doc = gemm_only(read(manifest))
    with tempfile.TemporaryDirectory(prefix="kern-run-gemms-") as d:
        p = Path(d) / "gemms.json"
        p.write_text(json.dumps(doc))
        with Runtime.load(p, kernels, weights=weights, device=gpu, progress=None) as rt:
            return kern_graph_ms(rt, "gemms", decode_symbols(doc))


# -- Qwen3-4B-shape weights ---------------------------------------------------------------
def export_weights(manifest: Path, plan: Path | None, hf_dir: Path, out: Path) -> Path:
    if out.is_file():
        return out
    from kern_weights import export_files, open_source
    export_files(manifest, open_source(hf=hf_dir), out, plan)
    return out


def kern_profile(rep: Report, case: str, load: dict, gpu: int) -> Any:
    """The decode step's :class:`.profile.Breakdown` (``tokens`` = 1, at
    :data:`.torch_side.PROFILE_POS`), recorded in a child process that loads the runtime
    with ``load`` (``manifest``, ``kernels``, ``weights``, ``capacity``); its table printed
    to stderr; None (and a FAILED row) if profiling failed — the bench goes on."""
    from .profile import breakdown, format_lines

    def run() -> Any:
        r = profile_in_child(load["manifest"], load["kernels"], load["weights"],
                             load["capacity"], gpu)
        return breakdown([tuple(e) for e in r["events"]], int(r["steps"]))
    b = _try(rep, case, "decode profile", run)
    if b is not None:
        sys.stderr.write(format_lines(f"{case} decode profile", b.lines()))
    return b


def profile_rows(rep: Report, case: str, key: str, b: Any) -> None:
    """Put breakdown ``b`` (if any) into ``rep.data[key]["profile"]`` and its summary rows
    into ``rep``."""
    if b is None:
        return
    from .profile import summary_rows
    rep.data.setdefault(key, {})["profile"] = b.as_dict()
    for what, kern, note in summary_rows(b):
        rep.add(case, what, kern, note=note)


# -- the command --------------------------------------------------------------------------
def _try(report: Report, case: str, what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as err:  # one failing part must not hide the others
        report.add(case, what, "FAILED", note=f"{type(err).__name__}: {str(err).splitlines()[0]}")
        return None


def run_bench(*, cases: list[str], smollm2: Any, qwen3_dir: Path | None, baseline: bool,
              steps: int, reps: int, prefill: int, gpu: int, profile: bool = False,
              spec: bool = False, spec_k: int = 7, spec_limit: int | None = None,
              levers: dict[str, list[tuple[str, Path]]] | None = None,
              ablate: bool = False) -> Report:
    """Measure everything asked for; ``smollm2`` is a :class:`defaults.Bundle`-like object.
    ``profile``: also the decode step's kernel breakdown, in ``data[case]["profile"]``.
    ``spec``: also prompt-lookup speculation vs plain greedy on the shipped prompt sets
    (:mod:`.spec`; SmolLM2) and the verify(k+1) / decode cost ratio (both cases).
    ``levers``: case -> [(label, manifest folder)], measured with the case's own manifest,
    PDL off and on (:mod:`.levers`).  ``ablate``: also the decode step without each class
    of kernels (:mod:`.ablate`)."""
    rep = Report()
    # (case, data key, what the profile's child loads)
    later: list[tuple[str, str, dict]] = []
    o = dict(baseline=baseline, steps=steps, reps=reps, gpu=gpu, profile=profile, spec=spec,
             spec_k=spec_k, ablate=ablate)
    levers = levers or {}
    if "smollm2" in cases:
        _smollm2_case(rep, later, smollm2, spec_limit=spec_limit,
                      levers=levers.get("smollm2"), **o)
    if "qwen3" in cases:
        _qwen3_case(rep, later, qwen3_dir, prefill=prefill, levers=levers.get("qwen3"), **o)
    # the profiles last, each in a child process (torch.profiler leaves CUPTI subscribed in
    # its process: every later launch there pays host time)
    for case, key, load in later:
        profile_rows(rep, case, key, kern_profile(rep, case, load, gpu))
    return rep


def _smollm2_case(rep: Report, later: list, b: Any, *, baseline: bool, steps: int, reps: int,
                  gpu: int, profile: bool, spec: bool, spec_k: int,
                  spec_limit: int | None, levers: list | None = None,
                  ablate: bool = False) -> None:
    """The SmolLM2 rows (``b``: the bundled default); a profile to take later is appended to
    ``later``."""
    from kern_manifest import read
    from kern_manifest.contract import check_manifest
    from kern_runtime import Runtime

    from ..capacity import choose

    info = check_manifest(read(b.manifest))
    cap = choose(None, info)
    limit, load_cap = cap.limit, cap.load
    if getattr(b, "hf", None) is not None:
        rep.add("smollm2", "weights", "seeded random",
                note="--random-weights: SmolLM2-135M's shape, no GGUF (speed rows only)")
    with Runtime.load(b.manifest, b.kernels, weights=b.weights, capacity=load_cap,
                      device=gpu, progress=None) as rt:
        d = _try(rep, "smollm2", "decode", lambda: kern_decode(
            rt, info.max_tokens, steps=steps, reps=reps, vocab=info.vocab,
            capacity=limit, fixed=info.context is not None))
        if spec:
            spec_rows(rep, "smollm2", _try(rep, "smollm2", "verify cost", lambda:
                                            verify_cost(rt, spec_k)))
            sp = _try(rep, "smollm2", "spec", lambda: smollm2_spec(
                rt, info, b, steps=steps, k=spec_k, capacity=limit,
                fixed=info.context is not None, limit=spec_limit))
    if levers:
        rep.data["smollm2_levers"] = _try(rep, "smollm2", "levers", lambda: lever_rows(
            rep, "smollm2", [("main", Path(b.manifest).parent), *levers], list(b.weights),
            steps=steps, reps=reps, gpu=gpu, info=info))
    if ablate:
        rep.data["smollm2_ablation"] = _try(rep, "smollm2", "ablation", lambda: ablation_rows(
            rep, "smollm2", Path(b.manifest), Path(b.kernels), list(b.weights), steps=steps,
            reps=reps, gpu=gpu, info=info))
    if profile:
        later.append(("smollm2", "smollm2", dict(
            manifest=b.manifest, kernels=b.kernels, weights=list(b.weights),
            capacity=load_cap)))
    base = _try(rep, "smollm2", "baseline", lambda: baseline_in_child(
        None, getattr(b, "config", None) or smollm2_config(b.tokenizer), steps=steps,
        reps=reps, gpu=gpu)) if baseline else None
    if spec and sp:
        # transformers' eager decode is ~30 ms/token: the peer runs the first PEER_PROMPTS
        ids = {k: v[:PEER_PROMPTS] for k, v in sp.pop("_ids").items()}
        peer = _try(rep, "smollm2", "transformers prompt lookup", lambda: lookup_in_child(
            b.tokenizer, ids, steps=steps, gpu=gpu)) if baseline else None
        spec_set_rows(rep, sp, peer)
        rep.data["smollm2_spec"] = {"kern": sp, "transformers": peer}
    if spec:
        _dspark_case(rep, steps=steps, limit=spec_limit, gpu=gpu)
    if d:
        rep.data["smollm2"] = {"kern": d, "baseline": base}
        t = TARGETS["smollm2_decode_ms"]
        rep.add("smollm2", "decode ms/token (graph loop)", f"{d['decode_ms']:.3f}",
                f"{base['decode_ms']:.3f} (HF compiled)" if base else "",
                f"≤ {t}", "met" if d["decode_ms"] <= t else "MISSED")
        rep.add("smollm2", "decode GPU ms/step (back-to-back)", f"{d['decode_gpu_ms']:.3f}",
                note=f"host+gaps {d['host_ms']:.3f} ms/step")
        feed_row(rep, "smollm2", d)


def _dspark_case(rep: Report, *, steps: int, limit: int | None, gpu: int) -> None:
    """The DSpark rows (:mod:`.dspark`): the bundled DSpark example, drafts per round = its
    block, or one row saying it is not there."""
    from ..defaults import DSPARK_EXAMPLE, example_dir
    from .dspark import dspark_rows, smollm2_dspark
    if example_dir(DSPARK_EXAMPLE) is None:
        rep.add("dspark", "DSpark speculation", "not measured",
                note=f"no examples/{DSPARK_EXAMPLE} (kern-gen dspark writes it)")
        return
    ds = _try(rep, "dspark", "DSpark speculation", lambda: smollm2_dspark(
        steps=steps, k=None, limit=limit, gpu=gpu))
    if ds:
        dspark_rows(rep, ds)
        rep.data["smollm2_dspark"] = ds


def _qwen3_case(rep: Report, later: list, qwen3_dir: Path | None, *, baseline: bool,
                steps: int, reps: int, gpu: int, profile: bool, spec: bool, spec_k: int,
                prefill: int, levers: list | None = None, ablate: bool = False) -> None:
    """The Qwen3-4B-shape rows (seeded random weights, cached in ``$KERN_CACHE``)."""
    from kern_manifest import read
    from kern_manifest.contract import check_manifest
    from kern_runtime import Runtime

    from ..capacity import choose
    from ..defaults import cache_dir, plan_file

    if qwen3_dir is None or not (qwen3_dir / "manifest.json").is_file():
        raise KernRunError(f"bench qwen3: `{qwen3_dir}` has no manifest.json (give --qwen3 DIR)")
    manifest, kernels = qwen3_dir / "manifest.json", qwen3_dir / "kernels"
    plan = plan_file(qwen3_dir)
    base_dir = cache_dir() / "qwen3-4b-random"
    hf = checkpoint_in_child(base_dir / "hf", QWEN3_4B)
    w = export_weights(manifest, plan, hf, base_dir / "kern-weights.safetensors")
    info = check_manifest(read(manifest))
    cap = choose(None, info)
    limit, load_cap = cap.limit, cap.load
    fixed = info.context is not None
    with Runtime.load(manifest, kernels, weights=[w], capacity=load_cap, device=gpu,
                      progress=None) as rt:
        d = _try(rep, "qwen3-4b", "decode", lambda: kern_decode(
            rt, info.max_tokens, steps=steps, reps=reps, vocab=info.vocab,
            capacity=limit, fixed=fixed))
        # a fixed KV state holds `limit` positions: the n prefill tokens + the decoded
        # prompt token + the one generated token must fit
        n_pf = min(prefill, limit - 2) if fixed else prefill
        p = _try(rep, "qwen3-4b", "prefill", lambda: kern_prefill(
            rt, info.max_tokens, n_pf, reps, info.vocab, capacity=limit, fixed=fixed))
        if spec:
            spec_rows(rep, "qwen3-4b", _try(rep, "qwen3-4b", "verify cost", lambda:
                                             verify_cost(rt, spec_k)))
    if levers:
        rep.data["qwen3_levers"] = _try(rep, "qwen3-4b", "levers", lambda: lever_rows(
            rep, "qwen3-4b", [("main", qwen3_dir), *levers], [w], steps=steps, reps=reps,
            gpu=gpu, info=info))
        for label, ldir in levers:
            g2 = _try(rep, "qwen3-4b", f"GEMMs alone ({label})", lambda: gemms_alone_ms(
                ldir / "manifest.json", ldir / "kernels", [w], gpu))
            if g2:
                rep.add("qwen3-4b", f"the step's GEMMs alone ms (lever {label})", f"{g2:.3f}",
                        "target ≤ 2.15")
    if ablate:
        rep.data["qwen3_ablation"] = _try(rep, "qwen3-4b", "ablation", lambda: ablation_rows(
            rep, "qwen3-4b", manifest, kernels, [w], steps=steps, reps=reps, gpu=gpu,
            info=info))
    if profile:
        later.append(("qwen3-4b", "qwen3", dict(
            manifest=manifest, kernels=kernels, weights=[w], capacity=load_cap)))
    g = _try(rep, "qwen3-4b", "GEMMs alone", lambda: gemms_alone_ms(manifest, kernels, [w], gpu))
    base = _try(rep, "qwen3-4b", "baseline", lambda: baseline_in_child(
        hf, None, steps=steps, reps=reps, gpu=gpu)) if baseline else None
    rep.data["qwen3"] = {"kern_decode": d, "kern_prefill": p, "gemms_ms": g, "baseline": base}
    if d:
        over = d["decode_ms"] / g - 1 if g else None
        t = TARGETS["qwen3_overhead"]
        rep.add("qwen3-4b", "decode ms/token (graph loop)", f"{d['decode_ms']:.3f}",
                f"{base['decode_ms']:.3f} (HF compiled)" if base else "",
                f"non-GEMM ≤ +{t:.0%}",
                "" if over is None else f"+{over:.1%} over GEMMs: {'met' if over <= t else 'MISSED'}")
        rep.add("qwen3-4b", "decode GPU ms/step (back-to-back)", f"{d['decode_gpu_ms']:.3f}",
                note=f"host+gaps {d['host_ms']:.3f} ms/step")
        feed_row(rep, "qwen3-4b", d)
    if g:
        # the weights once at the H200's measured copy bandwidth (../shared/facts/h200.md):
        # a constant, so it names its card (on an H100 the floor is higher)
        rep.add("qwen3-4b", "the step's GEMMs alone ms", f"{g:.3f}", "H200 floor 1.88 (copy bw)")
    if p:
        t = TARGETS["qwen3_prefill_tok_s"]
        rep.add("qwen3-4b", f"prefill {p['tokens']} tokens (chunk {p['chunk']})",
                f"{p['prefill_tok_s']:,.0f} tok/s", f"{p['prefill_ms']:.1f} ms", f"≥ {t:,}",
                ("met" if p["prefill_tok_s"] >= t else "MISSED")
                + (f" (--prefill {prefill} > the fixed context {limit})"
                   if p["tokens"] < prefill else ""))


def smollm2_config(gguf: Path) -> dict:
    """The transformers config of the SmolLM2 GGUF's shape (for the baseline)."""
    from kern_weights.gguf import read_metadata
    m = read_metadata(gguf)
    a = m.get("general.architecture", "llama")
    heads = m[f"{a}.attention.head_count"]
    return dict(model_type="llama", hidden_size=m[f"{a}.embedding_length"],
                num_hidden_layers=m[f"{a}.block_count"], num_attention_heads=heads,
                num_key_value_heads=m.get(f"{a}.attention.head_count_kv", heads),
                intermediate_size=m[f"{a}.feed_forward_length"],
                vocab_size=m.get(f"{a}.vocab_size", len(m["tokenizer.ggml.tokens"])),
                rms_norm_eps=m[f"{a}.attention.layer_norm_rms_epsilon"],
                rope_theta=m.get(f"{a}.rope.freq_base", 10000.0), tie_word_embeddings=True,
                max_position_embeddings=m.get(f"{a}.context_length", 2048))
