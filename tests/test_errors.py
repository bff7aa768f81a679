"""One error root across the packages: every error class a package raises on purpose is a
``KernError``, and ``fail`` prints it as its command always did, with its exit code."""

from __future__ import annotations

import pytest

from kern_gen.export import ExportError
from kern_gen.llama import WiringError
from kern_manifest import DecodeError, Diagnostic, KernError, ManifestError, VerificationError, fail
from kern_mine import CaptureFormatError, MineError
from kern_run.errors import ContractError, KernRunError, NoGpuError
from kern_run.bench.profile import ProfileError
from kern_runtime import (CallerError, CudaError, KernelArtifactError, KernRuntimeError,
                          ManifestProblem, WeightArtifactError)

DIAG = [Diagnostic("E0001", "no such file", "(top level)")]

CASES = [
    (KernError("bad"), 2, ["error: bad"]),
    (DecodeError(DIAG, "m.json"), 2, ["error: m.json: E0001 at (top level): no such file"]),
    (VerificationError(DIAG, "m.json"), 1, ["error: m.json: E0001 at (top level): no such file"]),
    (ManifestProblem("did not verify", where="manifest `m`"), 1,
     ["[manifest] manifest `m`: did not verify"]),
    (KernelArtifactError("missing", where="cubin `a.cubin`"), 1,
     ["[kernel artifact] cubin `a.cubin`: missing"]),
    (WeightArtifactError("2 weight problems", where="weights", problems=["a", "b"], help="h"), 1,
     ["[weight artifact] weights: 2 weight problems\n  - a\n  - b\n  help: h"]),
    (CallerError("out of range", where="symbol `tokens`"), 1,
     ["[caller] symbol `tokens`: out of range"]),
    (CudaError("cuInit", "CUDA_ERROR_NO_DEVICE"), 1,
     ["[CUDA] cuInit failed with CUDA_ERROR_NO_DEVICE"]),
    (KernRunError("--steps must be at least 1", "--prompt is empty"), 2,
     ["error: --steps must be at least 1", "error: --prompt is empty"]),
    (ContractError("manifest `m`: no program `decode`"), 2,
     ["error: manifest `m`: no program `decode`"]),
    (NoGpuError("no usable GPU here (no driver)"), 1, ["no usable GPU here (no driver)"]),
    (ExportError("weight `a`: missing", "weight `b`: missing"), 2,
     ["error: weight `a`: missing", "error: weight `b`: missing"]),
    (WiringError("decode site 3: kernel differs"), 2, ["refused: decode site 3: kernel differs"]),
    (MineError("x.jsonl:3: bad record"), 2, ["error: x.jsonl:3: bad record"]),
    (CaptureFormatError("x.jsonl:3: bad record"), 2, ["error: x.jsonl:3: bad record"]),
    (ProfileError("no CUDA kernels recorded"), 1, ["error: no CUDA kernels recorded"]),
]


@pytest.mark.parametrize("err,code,lines", CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_exit_code_and_lines_per_class(err, code, lines, capsys):
    assert isinstance(err, KernError)
    with pytest.raises(SystemExit) as e:
        fail("tool", err)
    assert e.value.code == code
    assert capsys.readouterr().err == "".join(f"tool: {line}\n" for line in lines)


def test_every_root_subclasses_kern_error():
    roots = [ManifestError, KernRuntimeError, KernRunError, ExportError, WiringError, MineError,
             CaptureFormatError, ProfileError]
    assert all(issubclass(r, KernError) for r in roots)
    # the standard bases callers may already catch stay
    assert issubclass(MineError, ValueError) and issubclass(CaptureFormatError, ValueError)
    assert issubclass(CallerError, ValueError) and issubclass(ProfileError, RuntimeError)
