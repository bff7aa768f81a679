"""Everything load checks before touching the GPU (pure: files and the manifest only).

:func:`prepare` verifies (or accepts a verified) manifest, plans memory for the capacity,
reads every cubin and checks its sha256 pin, and binds the weight buffers against the
safetensors headers. Problems that need no GPU to find are therefore reported in
milliseconds, on any machine, before a device is initialised.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import kern_manifest as km
from kern_manifest import Manifest, ManifestError, VerifiedManifest

from .artifacts import CubinFile, read_cubins
from .errors import CallerError, ManifestProblem
from .memory_plan import MemoryPlan, plan_memory
from .weights import WeightBinding, bind_weights


@dataclass(frozen=True)
class Prepared:
    vm: VerifiedManifest
    plan: MemoryPlan
    cubins: dict[str, CubinFile]
    search: list[str]           # module search order for unpinned steps
    weights: list[WeightBinding]
    weight_files: list[str]
    unused_tensors: int


def verified(manifest: "str | os.PathLike | VerifiedManifest | Manifest") -> VerifiedManifest:
    """A :class:`VerifiedManifest` from a path, a decoded manifest or a verified one."""
    if isinstance(manifest, VerifiedManifest):
        return manifest
    try:
        if isinstance(manifest, Manifest):
            return km.check(manifest)
        if isinstance(manifest, (str, os.PathLike)):
            return km.load(manifest)
    except ManifestError as err:
        text = km.render_human(err.diagnostics, err.source)
        problem = ManifestProblem(
            f"the manifest does not verify ({len(err.diagnostics)} "
            f"error{'s' if len(err.diagnostics) > 1 else ''})",
            where=err.source or "manifest", problems=[text])
        problem.diagnostics = err.diagnostics  # type: ignore[attr-defined]
        raise problem from None
    raise CallerError(f"expected a manifest path, Manifest or VerifiedManifest, got "
                      f"{type(manifest).__name__}")


def prepare(manifest: "str | os.PathLike | VerifiedManifest | Manifest",
            kernels_dir: str | os.PathLike | None = None,
            weights: Sequence[str | os.PathLike] = (),
            capacity: int | None = None) -> Prepared:
    vm = verified(manifest)
    if isinstance(weights, (str, os.PathLike)):
        weights = [weights]
    plan = plan_memory(vm, capacity)
    cubins, search = read_cubins(vm, kernels_dir)
    files = [str(Path(w)) for w in weights]
    has_weights = any(b.cls == "weight" for b in vm.manifest.buffers.values())
    if has_weights or files:
        bindings, unused = bind_weights(vm, files)
    else:
        bindings, unused = [], 0
    return Prepared(vm, plan, cubins, search, bindings, files, unused)
