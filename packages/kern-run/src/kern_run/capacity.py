"""The KV capacity kern-run loads a model with: chosen once, before the GPU is touched by it.

Rules (docs/caller-contract.md, "Capacity"):

- a fixed state (``bytes_fixed``) holds ``tokens.max`` positions; ``--capacity`` is refused;
- per-token states: ``--capacity C`` must not exceed the model's position limit (the
  ``positions`` domain: e.g. the mined cache writers' compiled bound; a larger state could
  never be addressed) and must fit in the GPU's free memory with the rest of the arena;
- the loaded pool is whole pages of PAGE_TOKENS slots (:func:`pool_slots`);
- without ``--capacity``: the position limit if it fits, else the largest capacity that
  does (a multiple of :data:`ROUND`); a manifest without a declared limit gets
  :data:`DEFAULT_CAPACITY`.

Memory: the arena at capacity C is ``base + C x bytes_per_token`` (``base`` = weights,
workspaces and scratch: the memory plan at capacity 0); :data:`RESERVE` bytes stay free for
the CUDA context's own allocations, cuBLASLt's workspace and the graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kern_manifest.contract import PAGE_TOKENS, ContractInfo

from .errors import KernRunError

DEFAULT_CAPACITY = 4096
ROUND = 256
RESERVE = 1 << 30


@dataclass(frozen=True)
class Capacity:
    limit: int               # positions the prompt plus the generated tokens may take
    load: int | None         # the ``capacity`` for ``Runtime.load`` (None: a fixed state)
    kv_bytes: int            # bytes of KV state at this capacity
    why: str                 # how it was chosen, for the start-up line

    def line(self) -> str:
        return f"kern-run: KV capacity {self.limit} tokens ({_gb(self.kv_bytes)} of KV; {self.why})"


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def pool_slots(requested: int, limit: int | None) -> int:
    """The slots to load for ``--capacity requested``: whole pages of PAGE_TOKENS (the paged
    attention addresses pages, and the runtime refuses a page that does not lie wholly in
    the pool), rounded up unless that passes the position limit, then down."""
    up = -(-requested // PAGE_TOKENS) * PAGE_TOKENS
    return up if limit is None or up <= limit else limit // PAGE_TOKENS * PAGE_TOKENS


def choose(requested: int | None, info: ContractInfo, *, base_bytes: int = 0,
           free_bytes: int | None = None) -> Capacity:
    """The capacity for ``requested`` (``--capacity``, or None) on a GPU with ``free_bytes``
    free (None: unknown, not checked); ``base_bytes``: the arena without the KV states."""
    if info.context is not None:
        if requested is not None:
            raise KernRunError(f"--capacity does not apply to this model: its KV state is fixed "
                               f"by the manifest (`bytes_fixed`) and holds {info.context} "
                               f"positions (`tokens.max`); leave --capacity out")
        return Capacity(info.context, None, info.kv_bytes_fixed, "fixed by the manifest")
    per = info.kv_bytes_per_token
    limit = info.position_limit
    room = None if free_bytes is None else free_bytes - base_bytes - RESERVE
    if requested is not None:
        if limit is not None and requested > limit:
            raise KernRunError(f"--capacity {requested} exceeds this model's position limit "
                               f"{limit} (the manifest's `positions` domain: its kernels "
                               f"address no position beyond {limit - 1}); use at most {limit}")
        if room is not None and requested * per > room:
            most = max(room // per, 0) if per else 0
            raise KernRunError(f"--capacity {requested} needs {_gb(requested * per)} of KV "
                               f"state; with {_gb(base_bytes)} of weights and workspaces, "
                               f"{_gb(free_bytes or 0)} free on the GPU leave room for "
                               f"{most} tokens")
        load = pool_slots(requested, limit)
        return Capacity(min(requested, load), load, load * per, "--capacity")
    want = limit if limit is not None else DEFAULT_CAPACITY
    why = "the model's position limit" if limit is not None else "the default"
    if room is not None and per and want * per > room:
        fit = (room // per) // ROUND * ROUND
        if fit < ROUND:
            raise KernRunError(f"the GPU has {_gb(free_bytes or 0)} free: not enough for "
                               f"{_gb(base_bytes)} of weights and workspaces plus a KV state "
                               f"of {ROUND} tokens")
        return Capacity(fit, fit, fit * per, f"the most that fits in {_gb(free_bytes or 0)} "
                                             f"free; the model's limit is {want}")
    return Capacity(want, want, want * per, why)
