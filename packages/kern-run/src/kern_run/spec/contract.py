"""What ``--spec`` needs from a manifest beyond the plain caller contract
(``docs/caller-contract.md``): a ``verify`` program and its ``predictions`` output
(i64 ``[tokens]``). Checked before any GPU is touched; every deviation is reported at once."""

from __future__ import annotations

from kern_manifest import Manifest

from ..errors import ContractError
from .loop import PREDICTIONS, VERIFY, VERIFY_MAX


def verify_contract(m: Manifest) -> int:
    """Check ``m`` for speculation; return the most tokens one ``verify`` call takes
    (``min(VERIFY_MAX, tokens.max)``). Raises :class:`ContractError`."""
    problems = []
    if VERIFY not in m.programs:
        problems.append(f"--spec needs a program `{VERIFY}` (speculative decoding's check of "
                        f"a round's drafts); the manifest has "
                        f"{', '.join(f'`{p}`' for p in m.programs)}")
    b = m.buffers.get(PREDICTIONS)
    if b is None:
        problems.append(f"--spec needs an output buffer `{PREDICTIONS}` (i64 [tokens])")
    elif (b.cls, b.dtype, list(b.shape)) != ("output", "i64", ["tokens"]):
        problems.append(f"buffer `{PREDICTIONS}` is {b.cls} {b.dtype} {list(b.shape)}; --spec "
                        f"needs output i64 ['tokens']")
    if problems:
        raise ContractError(*problems)
    sym = m.symbols.get("tokens")
    return min(VERIFY_MAX, sym.max if sym is not None else VERIFY_MAX)
