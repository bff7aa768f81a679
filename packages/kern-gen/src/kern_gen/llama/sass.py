"""Reading a kernel's machine code (sm_90 SASS) in a cubin, for one fact: may the kernel be
launched with programmatic dependent launch (PDL)?

A step launched with PDL may start while its predecessor on the stream still runs; it is
correct only if the kernel itself waits on the grid dependency (PTX ``griddepcontrol.wait``,
SASS ``ACQBULK``) before it touches memory the predecessor writes or reads.  The launch
attribute alone gives nothing but a race.  So kern-gen marks a step ``pdl`` only where the
function's code has that wait (:func:`pdl_wait`).

Facts the check relies on, read from this toolchain's output (ptxas 13.0, ``-arch=sm_90``)
and confirmed by ``cuobjdump -sass`` on the H200 machine (docs/measurements.md, 2026-12-02):

- a cubin is an ELF64 file; function ``f``'s code is section ``.text.f``, a sequence of
  16-byte instructions;
- the low 12 bits of an instruction's first (little-endian) 64-bit word are its opcode, bits
  12..15 its guard predicate (``0x7`` = PT, always; bit 15 negates);
- ``griddepcontrol.wait`` is ``ACQBULK``, opcode ``0x82e`` (``launch_dependents`` is
  ``PREEXIT``, ``0x82d``);
- global memory access (any operand form we saw): LD ``0x980``, LDG ``0x981``, ST ``0x985``,
  STG ``0x986``, ATOM ``0x98a``, RED ``0x98e``, ATOMG ``0x9a8``, ATOMG.CAS ``0x3a9``,
  LDGSTS ``0xfae``, UBLKCP ``0x3ba``, UTMALDG ``0x5b4``, UTMASTG ``0x3b5``.

The order test is on the linear code, not on control flow: it accepts a wait that comes
before the first memory instruction in address order (where Inductor's Triton kernels and
kern's own kernels put it: straight-line code at the top).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ACQBULK = 0x82E
PREEXIT = 0x82D
GLOBAL_MEMORY = {
    0x980: "LD", 0x981: "LDG", 0x985: "ST", 0x986: "STG", 0x98A: "ATOM", 0x98E: "RED",
    0x9A8: "ATOMG", 0x3A9: "ATOMG.CAS", 0xFAE: "LDGSTS", 0x3BA: "UBLKCP", 0x5B4: "UTMALDG",
    0x3B5: "UTMASTG",
}
_ALWAYS = 0x7          # guard predicate PT, not negated


class CubinError(ValueError):
    """The bytes are not a cubin this reader understands (or lack the function)."""


@dataclass(frozen=True)
class PdlFacts:
    """What one function's code says about PDL.

    ``wait``: index of the first unconditional ACQBULK (None: none); ``first_access``:
    index and name of the first global memory instruction (None: none); ``trigger_at``: the
    first PREEXIT's index (None: none)."""

    wait: int | None
    first_access: tuple[int, str] | None
    trigger_at: int | None = None

    @property
    def trigger(self) -> bool:
        """The code has a PREEXIT (it lets its dependents launch before it ends)."""
        return self.trigger_at is not None

    @property
    def triggers_after_wait(self) -> bool:
        """No PREEXIT before the first unconditional wait (in address order): the function's
        dependents launch only after its own predecessor has completed."""
        return self.trigger_at is None or (self.wait is not None
                                           and self.trigger_at > self.wait)

    @property
    def waits_first(self) -> bool:
        """An unconditional wait before every global memory access (in address order)."""
        return self.wait is not None and (self.first_access is None
                                          or self.wait < self.first_access[0])


def function_code(cubin: bytes, symbol: str) -> bytes:
    """The machine code of ``symbol`` (ELF section ``.text.<symbol>``)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise CubinError("not a little-endian ELF64 cubin")
    try:
        shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        secs = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
                for i in range(shnum)]
        names = secs[shstrndx][4]
        want = f".text.{symbol}".encode()
        for name, _typ, _flags, _addr, off, size in secs:
            end = cubin.index(b"\0", names + name)
            if cubin[names + name:end] == want:
                if size % 16 or off + size > len(cubin):
                    raise CubinError(f"section .text.{symbol} is not whole 16-byte "
                                     f"instructions")
                return cubin[off:off + size]
    except (struct.error, IndexError, ValueError) as exc:
        if isinstance(exc, CubinError):
            raise
        raise CubinError(f"malformed ELF ({exc})") from None
    raise CubinError(f"the cubin has no function `{symbol}` (section .text.{symbol})")


def _ops(cubin: bytes, symbol: str):
    """(index, opcode, guard predicate) of each instruction of ``symbol``, in address order."""
    code = function_code(cubin, symbol)
    for i in range(len(code) // 16):
        lo = struct.unpack_from("<Q", code, 16 * i)[0]
        yield i, lo & 0xFFF, (lo >> 12) & 0xF


def pdl_facts(cubin: bytes, symbol: str) -> PdlFacts:
    wait = access = trigger_at = None
    for i, op, guard in _ops(cubin, symbol):
        if op == ACQBULK and guard == _ALWAYS and wait is None:
            wait = i
        elif op == PREEXIT and trigger_at is None:
            trigger_at = i
        elif op in GLOBAL_MEMORY and access is None:
            access = (i, GLOBAL_MEMORY[op])
    return PdlFacts(wait, access, trigger_at)


def pdl_wait(cubin: bytes, symbol: str, *, weights_first: bool = False) -> bool:
    """May ``symbol`` be launched with PDL?  Yes if its code waits on the grid dependency
    unconditionally before any global memory access.  ``weights_first``: an own kernel
    whose source reads only weights before the wait (weights are never written by any
    program: the verifier's dataflow rule), so the wait alone is required."""
    return pdl_allowed(pdl_facts(cubin, symbol), weights_first=weights_first)


def pdl_allowed(f: PdlFacts, *, weights_first: bool = False) -> bool:
    """:func:`pdl_wait`'s rule on facts already read."""
    return f.wait is not None if weights_first else f.waits_first


def accesses_before_wait(cubin: bytes, symbol: str) -> int:
    """Global memory instructions of ``symbol`` before its first unconditional wait, in address
    order (all of them when it has no wait): what a ``weights_first`` kernel really requests
    while its predecessor still runs.  ptxas may move loads across the wait: gemv.cu's
    first W batch, written before it, compiled to after it until it was loaded coherently
    (kernels/gemv_core.cuh ``ld_w_first``)."""
    n = 0
    for _, op, guard in _ops(cubin, symbol):
        if op == ACQBULK and guard == _ALWAYS:
            break
        n += op in GLOBAL_MEMORY
    return n
