"""Shared by kern-gen's generator tests."""

from __future__ import annotations

from pathlib import Path


def own_committed(example: Path) -> dict[str, bytes]:
    """The own kernels' cubins committed with an example (every ``kernels/*.cubin`` whose name
    is not a mined module's 16 hex digits), for generating without nvcc."""
    import re
    return {p.name: p.read_bytes() for p in sorted((example / "kernels").glob("*.cubin"))
            if not re.fullmatch(r"[0-9a-f]{16}\.cubin", p.name)}


def assert_same_output(written: Path, example: Path) -> None:
    """``written`` (a generator's output directory) equals the committed ``example`` byte for
    byte: manifest, plan, report and every kernel."""
    for f in ("manifest.json", "export-plan.json", "README.md"):
        assert (written / f).read_bytes() == (example / f).read_bytes(), f
    got = sorted(p.name for p in (written / "kernels").iterdir())
    assert got == sorted(p.name for p in (example / "kernels").iterdir())
    for n in got:
        assert (written / "kernels" / n).read_bytes() == (example / "kernels" / n).read_bytes(), n


def wiring_inputs(preset: str, tmp: Path):
    """``(mined JSON path, ModelConfig, wiring.Inputs)`` of a committed capture preset (mined
    into ``tmp``)."""
    from kern_mine import encode_json, mine

    from kern_gen.llama import config as C
    from kern_gen.llama.arch import ARCHS
    from kern_gen.llama.command import PRESETS
    from kern_gen.llama.facts import load
    from kern_gen.llama.kv import KVLayout
    from kern_gen.llama.pipeline import choose_groups
    from kern_gen.llama.wiring import Inputs

    root = Path(__file__).resolve().parents[3]
    cap, cfg_path = root / PRESETS[preset][0], root / PRESETS[preset][1]
    mined = tmp / "m.json"
    mined.write_bytes(encode_json(mine(cap)))
    facts = load(cap, mined, None)
    cfg = C.load(cfg_path)
    dg, pg = choose_groups(facts)
    return mined, cfg, Inputs(facts, cfg, ARCHS[cfg.model_type],
                              KVLayout.of(cfg, int(facts.sidecar["cache"]["max_len"])), dg, pg)


def gemm_variants(tmp_path_factory, gemms: tuple[str, ...], cubin: str) -> dict:
    """Per preset, ``{gemm: generate(…, gemm=gemm)}`` for each ``--gemm`` choice of ``gemms``
    (fused, ``--no-fuse-norm``: the norm fusion is gemv.cu's alone), mined once per preset,
    with the example's committed own cubins and gemv.cubin and ``cubin`` freshly built by
    nvcc; ``"sha"``: the sha256 of the built ``cubin``."""
    import hashlib
    import shutil

    from kern_mine import encode_json, mine

    from kern_gen.llama import generate
    from kern_gen.llama.command import PRESETS
    from kern_gen.llama.pipeline import _build_own

    root = Path(__file__).resolve().parents[3]
    built = _build_own(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    out = {}
    for name in PRESETS:
        cap, cfg, ex, label = (root / p if i < 3 else p for i, p in enumerate(PRESETS[name]))
        mined = tmp_path_factory.mktemp("mined") / f"{name}.json"
        mined.write_bytes(encode_json(mine(cap)))
        own = {**own_committed(ex), "gemv.cubin": built["gemv.cubin"], cubin: built[cubin]}
        out[name] = {g: generate(cap, cfg, mined=mined, label=label, gemm=g, own_cubins=own,
                                 command=f"uv run --frozen kern-gen {name} --gemm {g}",
                                 fuse_norm=False)
                     for g in gemms}
        out[name]["sha"] = hashlib.sha256(built[cubin]).hexdigest()
    return out


def fused_decode(preset: str, tmp: Path):
    """``(ModelConfig, Arch, decode)``: a committed capture's ``decode`` program as the norm
    passes (``fuse_norm``, ``own_norm``) receive it (merged, fused, rope fused)."""
    from kern_gen.llama import fuse as FU
    from kern_gen.llama import fuse_rope as FR
    from kern_gen.llama import merge as M
    from kern_gen.llama.arch import ARCHS
    from kern_gen.llama.programs import PROGRAMS

    _, cfg, g = wiring_inputs(preset, tmp)
    prog = FR.fuse_rope(FU.fuse_program(M.merge_projections(PROGRAMS["decode"](g), cfg)),
                        cfg)[0]
    return cfg, ARCHS[cfg.model_type], prog


def norm_at(prog, t: int) -> int:
    """The index of ``prog``'s ``t``-th captured RMSNorm op."""
    from kern_gen.llama.ir import reads
    return [j for j, o in enumerate(prog.ops) if o.kind == "mined"
            and any(r.buf and r.buf.endswith("layernorm.weight") or r.buf == "model.norm.weight"
                    for r in reads(o))][t]
