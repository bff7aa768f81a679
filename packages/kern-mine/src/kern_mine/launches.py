"""Launch selection: which launches executed, which are benchmark repetitions, and the
integer identity of every launch.

Contracts:

* A launch *executed* unless it was recorded into a graph under stream capture
  (``capturing: true``) or the launch call failed (``result != 0``); others are excluded
  from everything downstream and only counted.
* A kernel *identity* is (module sha256, name): same-named kernels of different modules are
  different instantiations (Triton specialises per config; FORMAT.md, DESIGN §4).
* *Benchmark runs* are what an autotuner leaves: one kernel (optionally alternating with a
  cache-flush kernel, a timer kernel...) launched again and again with byte-identical
  arguments.  Without model knowledge they are recognisable as a stretch where every launch is
  byte-identical (identity, geometry and parameter bytes) to the launch ``p`` positions
  earlier, for a small period ``p`` (1..4) and at least ``min_repeats`` repetitions.  A real
  forward never does that: consecutive layers bind different weights.  Such launches are the
  *dummy* launches and are excluded from cutting and mining (counted in the report).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .capture_format import Launch

__all__ = ["Identity", "Selection", "select_launches", "identity_label"]


class Identity(msgspec.Struct, frozen=True):
    """A kernel identity: the module it came from and its symbol."""

    module: str | None
    name: str | None


def identity_label(ident: Identity) -> str:
    """``name@module[:8]`` (``@?`` when the module is unknown)."""
    mod = ident.module[:8] if ident.module else "?"
    return f"{ident.name or '<unnamed>'}@{mod}"


class Selection(msgspec.Struct):
    """The launches of a capture sorted into executed / dummy / kept, with identity ids."""

    identities: list[Identity]
    ident: list[int]
    """Identity id of every launch of the capture (index = position in ``capture.launches``)."""
    not_executed: int
    """Launches under stream capture or failed."""
    dummy: list[int]
    """Launch indices recognised as benchmark repetitions."""
    kept: list[int]
    """Launch indices that executed and are not dummy, in call order: the input of cutting."""


def _signature(launch: Launch) -> tuple:
    if launch.params is not None:
        args: object = tuple(p.hex for p in launch.params)
    else:
        args = launch.raw
    return (launch.name, launch.module, launch.grid, launch.block, launch.smem, args)


def _benchmark_mask(sigs: Sequence[int], min_repeats: int, max_period: int = 4) -> list[bool]:
    """True for launches inside a run that repeats itself byte-identically with a small period."""
    n = len(sigs)
    mask = [False] * n
    for p in range(1, max_period + 1):
        need = p * (min_repeats - 1)  # matches s[i] == s[i-p] needed for min_repeats periods
        run_start = None
        for i in range(p, n + 1):
            same = i < n and sigs[i] == sigs[i - p]
            if same:
                if run_start is None:
                    run_start = i
            elif run_start is not None:
                if i - run_start >= need:
                    for j in range(run_start - p, i):
                        mask[j] = True
                run_start = None
    return mask


def select_launches(launches: Sequence[Launch], min_repeats: int = 8) -> Selection:
    """Identity ids for every launch, and the executed, non-benchmark launches to mine.

    ``min_repeats`` <= 1 disables benchmark recognition."""
    ids: dict[Identity, int] = {}
    identities: list[Identity] = []
    ident: list[int] = []
    executed: list[int] = []
    for i, launch in enumerate(launches):
        key = Identity(launch.module, launch.name)
        k = ids.get(key)
        if k is None:
            k = ids[key] = len(identities)
            identities.append(key)
        ident.append(k)
        if launch.executed:
            executed.append(i)
    dummy: list[int] = []
    kept = executed
    if min_repeats > 1 and executed:
        sig_ids: dict[tuple, int] = {}
        sigs = [sig_ids.setdefault(_signature(launches[i]), len(sig_ids)) for i in executed]
        mask = _benchmark_mask(sigs, min_repeats)
        dummy = [i for i, m in zip(executed, mask) if m]
        kept = [i for i, m in zip(executed, mask) if not m]
    return Selection(identities, ident, len(launches) - len(executed), dummy, kept)
