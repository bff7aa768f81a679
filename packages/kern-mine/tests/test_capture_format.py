"""Tests of kern_mine.capture_format on recorded capture files (tests/fixtures/captures)."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import lzma
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kern_mine.capture_format import (
    FORMAT_VERSION,
    CaptureFormatError,
    find_launches_file,
    iter_launches,
    read_capture,
    read_modules,
)

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "captures"
SYNTH = FIXTURES / "synthetic-v1"


def test_reads_synthetic_capture() -> None:
    cap = read_capture(SYNTH)
    assert cap.meta is not None and cap.meta.version == FORMAT_VERSION == 1
    assert cap.meta.cmdline == ("python3", "app.py")
    assert cap.summary is not None and cap.summary.launches == len(cap.launches) == 6
    assert not cap.truncated
    assert [m.module_id for m in cap.modules] == [1, 2]
    assert [launch.seq for launch in cap.launches] == list(range(6))


def test_flat_launch_params_and_pointers() -> None:
    first = read_capture(SYNTH).launches[0]
    assert first.api == "cuLaunchKernel" and first.handle == "function"
    assert first.grid == (40, 1, 1) and first.block == (128, 1, 1) and first.threads == 128
    assert first.fattr is not None and first.fattr.binary_version == 90
    assert first.params is not None and len(first.params) == 5
    p0, p1, p2 = first.params[:3]
    assert p0.ptrs[0].range_start == 0x7F0000000000 and p0.ptrs[0].offset == 0x200
    assert p0.as_int() == p0.ptrs[0].value
    assert p1.ptrs[0].offset == 0x1200
    assert p2.ptrs == () and p2.as_int() == 9728 and p2.size == len(p2.data) == 4
    assert first.executed


def test_struct_with_pointers_inside() -> None:
    s = read_capture(SYNTH).launches[1]
    assert s.handle == "kernel" and s.name == "_Z6k_ptrsPfPKfi"
    (p,) = s.params or ()
    assert p.size == 24 and [q.at for q in p.ptrs] == [0, 16]
    assert int.from_bytes(p.data[8:12], "little") == 32


def test_packed_extra_without_layout_and_attrs() -> None:
    x = read_capture(SYNTH).launches[2]
    assert x.args == "extra" and x.extra_size == 16 and x.params is None
    assert x.raw is not None and bytes.fromhex(x.raw)[0] == 0x00 and len(bytes.fromhex(x.raw)) == 16
    assert x.module is None and x.fattr is None
    assert x.attrs[0].id == 4 and x.attrs[0].value == (2, 1, 1)
    assert x.attrs[1].value == 1


def test_extra_decoded_capture_flag_and_cooperative() -> None:
    cap = read_capture(SYNTH)
    e, g, c = cap.launches[3], cap.launches[4], cap.launches[5]
    assert e.api == "cuLaunchKernel_ptsz" and e.params is not None
    assert e.params[1].as_int(signed=True) == -5 and e.module_how == "name"
    assert g.capturing is True and not g.executed
    assert c.capturing is None and c.params == () and c.args == "none" and c.executed


def test_modules_are_addressed_by_sha256() -> None:
    cap = read_capture(SYNTH)
    for m in cap.modules:
        assert m.sha256 is not None
        data = cap.module_bytes(m.sha256)
        assert data is not None and len(data) == m.size
        assert hashlib.sha256(data).hexdigest() == m.sha256
    assert cap.module_file("0" * 64) is None
    flat = cap.launches[0]
    assert flat.module is not None and b"\0" + flat.name.encode() + b"\0" in cap.module_bytes(flat.module)


def test_xz_compressed_module(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    cap = read_capture(d)
    sha = cap.modules[0].sha256
    assert sha is not None
    cub = d / "modules" / f"{sha}.cubin"
    raw = cub.read_bytes()
    (d / "modules" / f"{sha}.cubin.xz").write_bytes(lzma.compress(raw))
    cub.unlink()
    assert cap.module_file(sha) == d / "modules" / f"{sha}.cubin.xz"
    assert cap.module_bytes(sha) == raw


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "pid-4242"
    shutil.copytree(SYNTH, d)
    return d


@pytest.mark.parametrize("suffix,opener", [(".gz", gzip.open), (".xz", lzma.open)])
def test_compressed_launch_files(tmp_path: Path, suffix: str, opener) -> None:
    d = _copy(tmp_path)
    plain = d / "launches.jsonl"
    with opener(d / f"launches.jsonl{suffix}", "wb") as f:
        f.write(plain.read_bytes())
    plain.unlink()
    assert find_launches_file(d).name == f"launches.jsonl{suffix}"
    cap = read_capture(d)
    assert cap.launches == read_capture(SYNTH).launches
    # A base directory holding one pid-* capture, and the file itself, also work.
    assert read_capture(tmp_path).launches == cap.launches
    assert list(iter_launches(d / f"launches.jsonl{suffix}")) == cap.launches


def test_zstd_if_available(tmp_path: Path) -> None:
    try:
        from compression import zstd  # type: ignore[import-not-found]

        compress = zstd.compress
    except ImportError:
        zstandard = pytest.importorskip("zstandard")
        compress = zstandard.ZstdCompressor().compress
    d = _copy(tmp_path)
    (d / "launches.jsonl.zst").write_bytes(compress((d / "launches.jsonl").read_bytes()))
    (d / "launches.jsonl").unlink()
    assert read_capture(d).launches == read_capture(SYNTH).launches


def test_truncated_last_line_is_dropped(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    text = (d / "launches.jsonl").read_text()
    (d / "launches.jsonl").write_text(text + text.splitlines()[0][:50])
    (d / "summary.json").unlink()
    cap = read_capture(d)
    assert cap.truncated and len(cap.launches) == 6 and cap.summary is None
    assert cap.partial_line == 7


def test_malformed_line_reports_file_and_line(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    lines = (d / "launches.jsonl").read_text().splitlines(keepends=True)
    lines[2] = '{"seq": "not an int"}\n'
    (d / "launches.jsonl").write_text("".join(lines))
    with pytest.raises(CaptureFormatError, match=r"launches.jsonl:3"):
        read_capture(d)


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    text = (d / "launches.jsonl").read_text().replace('"seq":0,', '"seq":0,"future_key":{"a":1},', 1)
    (d / "launches.jsonl").write_text(text)
    assert read_capture(d).launches[0].seq == 0


def test_newer_version_is_refused(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    meta = (d / "meta.json").read_text().replace('"version":1', f'"version":{FORMAT_VERSION + 1}')
    (d / "meta.json").write_text(meta)
    with pytest.raises(CaptureFormatError, match="newer"):
        read_capture(d)


def test_not_a_capture(tmp_path: Path) -> None:
    with pytest.raises(CaptureFormatError):
        read_capture(tmp_path)
    assert read_modules(tmp_path) == []


def _real_captures() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.glob("*/launches.jsonl*") if p.parent != SYNTH)


@pytest.mark.parametrize("capdir", _real_captures(), ids=lambda p: p.name)
def test_recorded_captures_decode(capdir: Path) -> None:
    """Every committed capture decodes; its launches are ordered and reference indexed modules."""
    cap = read_capture(capdir)
    assert cap.launches, capdir
    seqs = [launch.seq for launch in cap.launches]
    assert seqs == sorted(seqs)
    shas = {m.sha256 for m in cap.modules}
    if shas:
        assert {launch.module for launch in cap.launches if launch.module} <= shas


def test_ground_truth_capture_still_checks() -> None:
    """The recorded GPU capture of capture/gt/gt.cu passes capture/gt/gt_check.py, and the
    reader agrees with it on the launches."""
    gt = FIXTURES / "gt-h200"
    truth = gt / "ground-truth"
    checker = Path(__file__).resolve().parents[3] / "capture" / "gt" / "gt_check.py"
    spec = importlib.util.spec_from_file_location("gt_check", checker)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    argv = ["gt_check", str(gt), str(truth / "expected.jsonl"), str(truth / "modA.cubin"), str(truth / "modB.cubin")]
    argv += [str(p) for p in sorted((truth / "rt").glob("*.cubin"))]
    assert mod.main(argv) == 0
    cap = read_capture(gt)
    assert cap.summary is not None and cap.summary.launches == len(cap.launches) == 16
    by_api = {launch.api for launch in cap.launches}
    assert {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuLaunchKernel_ptsz"} <= by_api
    assert sum(launch.capturing is True for launch in cap.launches) == 2
    extra = [launch for launch in cap.launches if launch.args == "extra"]
    assert len(extra) == 2 and all(launch.params is not None and len(launch.params) == 5 for launch in extra)


CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


@pytest.mark.skipif(
    not (CUDA_HOME / "include" / "cupti.h").exists() or shutil.which("make") is None or shutil.which("nm") is None,
    reason="needs the CUDA headers with CUPTI, make and nm",
)
def test_capture_library_builds_without_libcuda(tmp_path: Path) -> None:
    """`make -C capture` builds the injection library on a machine without libcuda; it exports
    InitializeInjection and leaves no driver (cu*) symbol to the host (resolved by dlsym)."""
    src = Path(__file__).resolve().parents[3] / "capture"
    work = tmp_path / "capture"
    shutil.copytree(src, work, ignore=shutil.ignore_patterns("*.o", "*.so"))
    subprocess.run(["make", "-s", "-C", str(work), f"CUDA={CUDA_HOME}"], check=True, capture_output=True)
    lib = work / "libkerncapture.so"
    defined = subprocess.run(["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True)
    assert any(line.split()[-1] == "InitializeInjection" for line in defined.stdout.splitlines())
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], check=True, capture_output=True, text=True)
    names = [line.split()[-1].split("@")[0] for line in undefined.stdout.splitlines() if line.strip()]
    assert not [n for n in names if n.startswith("cu") and not n.startswith("cupti")]
