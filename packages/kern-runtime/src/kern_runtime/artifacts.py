"""Kernel artifacts: which cubin files a manifest needs, their sha256 pins, and the rule that
resolves every step's symbol to one function (pure; the GPU is reached through a lookup
callable that the CUDA backend provides).

Resolution rule (DESIGN §5):
- a pinned step (``cubin`` set) resolves only in its file; its ``sha256``, if given, must
  match the file's bytes;
- an unpinned step searches every loaded module (every ``*.cubin`` of the kernels directory,
  in name order) and keeps the functions of that name whose parameter layout — count and
  byte size of each parameter, from ``cuFuncGetParamInfo`` — equals the step's declared
  ``params``; same-named functions with other layouts (a Triton specialisation with a
  parameter folded away, say) are told apart that way. Several matches are an error unless
  their modules are byte-identical.
- externs (``extern:…``) resolve to the built-in, with no module.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kern_manifest import VerifiedManifest
from msgspec import UNSET

from . import errors
from .errors import KernelArtifactError

#: lookup(module file name, symbol) -> parameter sizes in bytes, or None if absent.
Lookup = Callable[[str, str], "Sequence[int] | None"]


@dataclass(frozen=True, slots=True)
class CubinFile:
    name: str       # path relative to the kernels directory, as the manifest names it
    path: str
    data: bytes
    sha256: str


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where a step's symbol lives: ``module`` is None for externs."""

    kernel: str
    step: int
    symbol: str
    module: str | None
    pinned: bool


def read_cubins(vm: VerifiedManifest, kernels_dir: str | os.PathLike | None
                ) -> tuple[dict[str, CubinFile], list[str]]:
    """Read every cubin the manifest needs and check its sha256 pins.

    Returns (files by name, search order for unpinned steps). Raises one
    :class:`KernelArtifactError` listing every missing file and every sha256 mismatch.
    """
    pinned: dict[str, list[tuple[str, int, str | None]]] = {}
    unpinned = False
    for kname, k in vm.manifest.kernels.items():
        for j, s in enumerate(k.impl.steps):
            if s.is_extern:
                continue
            if s.cubin is UNSET:
                unpinned = True
            else:
                sha = None if s.sha256 is UNSET else s.sha256.lower()  # type: ignore[union-attr]
                pinned.setdefault(s.cubin, []).append((kname, j, sha))  # type: ignore[arg-type]
    if not pinned and not unpinned:
        return {}, []
    if kernels_dir is None:
        raise KernelArtifactError("the manifest needs cubins but no kernels directory was given",
                                  help="pass kernels_dir=<folder holding the *.cubin files>")
    root = Path(kernels_dir)
    if not root.is_dir():
        raise KernelArtifactError(f"kernels directory `{root}` does not exist")
    names = set(pinned)
    search: list[str] = []
    if unpinned:
        search = sorted(p.name for p in root.glob("*.cubin") if p.is_file())
        names.update(search)
    files: dict[str, CubinFile] = {}
    problems: list[str] = []
    for name in sorted(names):
        path = root / name
        try:
            data = path.read_bytes()
        except OSError as err:
            users = ", ".join(errors.kernel_step(k, j) for k, j, _ in pinned.get(name, []))
            problems.append(f"{errors.cubin(name)}: cannot read `{path}` "
                            f"({err.strerror or err}); needed by {users}")
            continue
        digest = hashlib.sha256(data).hexdigest()
        files[name] = CubinFile(name, str(path), data, digest)
        for k, j, sha in pinned.get(name, []):
            if sha is not None and sha != digest:
                problems.append(f"{errors.cubin(name)}: sha256 is {digest}, but "
                                f"{errors.kernel_step(k, j)} pins {sha}")
    if unpinned and not search:
        problems.append(f"steps without `cubin` need modules to search, but `{root}` holds "
                        f"no *.cubin file")
    if problems:
        n = len(problems)
        raise KernelArtifactError(f"{n} kernel artifact problem{'s' if n > 1 else ''}",
                                  where=f"kernels directory `{root}`", problems=problems)
    return files, search


def _fmt_sizes(sizes: Sequence[int]) -> str:
    return f"{len(sizes)} params, sizes [{', '.join(map(str, sizes))}]"


def resolve_steps(vm: VerifiedManifest, files: dict[str, CubinFile], search: Sequence[str],
                  lookup: Lookup) -> dict[tuple[str, int], Resolution]:
    """Resolve every step of every kernel; raise one :class:`KernelArtifactError` listing
    every step that cannot be resolved."""
    out: dict[tuple[str, int], Resolution] = {}
    problems: list[str] = []
    for kname, k in vm.manifest.kernels.items():
        for j, s in enumerate(k.impl.steps):
            where = errors.kernel_step(kname, j, s.symbol)
            if s.is_extern:
                out[(kname, j)] = Resolution(kname, j, s.symbol, None, False)
                continue
            want = [p.abi_size for p in vm.step_params[kname][j]]
            if s.cubin is not UNSET:
                have = lookup(s.cubin, s.symbol)  # type: ignore[arg-type]
                if have is None:
                    problems.append(f"{where}: symbol not found in {errors.cubin(s.cubin)}")  # type: ignore[arg-type]
                elif list(have) != want:
                    problems.append(f"{where}: declared params have {_fmt_sizes(want)}, but the "
                                    f"function in {errors.cubin(s.cubin)} has {_fmt_sizes(have)}")  # type: ignore[arg-type]
                else:
                    out[(kname, j)] = Resolution(kname, j, s.symbol, s.cubin, True)  # type: ignore[arg-type]
                continue
            found = [(mod, lookup(mod, s.symbol)) for mod in search]
            found = [(mod, sizes) for mod, sizes in found if sizes is not None]
            match = [mod for mod, sizes in found if list(sizes) == want]  # type: ignore[arg-type]
            if not found:
                problems.append(f"{where}: symbol not found in any of the {len(search)} "
                                f"modules searched")
            elif not match:
                seen = "; ".join(f"`{mod}`: {_fmt_sizes(sz)}" for mod, sz in found)  # type: ignore[arg-type]
                problems.append(f"{where}: declared params have {_fmt_sizes(want)}, no module's "
                                f"function of that name matches ({seen})")
            elif len({files[mod].sha256 for mod in match}) > 1:
                problems.append(f"{where}: ambiguous, the same layout is in "
                                f"{', '.join(f'`{m}`' for m in match)}; pin the step with `cubin`")
            else:
                out[(kname, j)] = Resolution(kname, j, s.symbol, match[0], False)
    if problems:
        n = len(problems)
        raise KernelArtifactError(f"{n} step{'s' if n > 1 else ''} could not be resolved",
                                  problems=problems)
    return out
