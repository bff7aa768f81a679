"""The KV states' layout: one place for the cache arithmetic.

The capture (``capture/models/token_major_cache.py``) stores each layer's K and V token-major,
``[1, L, kv_heads, head_dim]`` bf16, contiguous, where ``L`` is the model's own position limit;
the compiled cache writers store element ``d`` of head ``h`` of the token written to slot
``s`` at ``d + head_dim*h + kv_heads*head_dim*s``: no ``L`` in any address, only in their
bounds check ``0 <= s < L``.  So each of K and V of each layer is its own state of
``bytes_per_token`` = ``kv_heads x head_dim x 2`` bytes (``kv.L<l>.k`` / ``kv.L<l>.v``, offset
0): the runtime sizes them for the capacity the caller picks, up to ``L``.  The own attention
kernels are told the same strides (slot ``kv_heads x head_dim``, head ``head_dim`` elements)
and read keys through the caller's page table (``block_table``, :attr:`KVLayout.table_pages`
pages of ``PAGE_TOKENS`` slots per row), so the states are one paged pool shared by
sequences.
:func:`.falsify.cache_layout` asserts the sidecar's cache tensors have this layout,
:mod:`.writers` that the captured writers store with these coefficients and bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from kern_manifest.contract import PAGE_TOKENS

from .config import ModelConfig
from .ir import Ref

ELEM_BYTES = 2          # bf16
LAYOUT = "token-major"  # the sidecar's cache layout name (``cache.layout``)


@dataclass(frozen=True)
class KVLayout:
    layers: int
    kv_heads: int
    max_len: int        # L: the captured cache length = the writers' compiled bound
    head_dim: int
    dtype: str = "bfloat16"       # the sidecar's (torch) name of the element type

    @classmethod
    def of(cls, cfg: ModelConfig, max_len: int) -> KVLayout:
        return cls(cfg.layers, cfg.kv_heads, max_len, cfg.head_dim)

    @property
    def bytes_per_token(self) -> int:
        """Bytes of one token slot of one state (one layer's K or V)."""
        return self.kv_heads * self.head_dim * ELEM_BYTES

    @property
    def total_bytes_per_token(self) -> int:
        """Bytes of one token over every state (K and V of every layer)."""
        return 2 * self.layers * self.bytes_per_token

    @property
    def slot_stride(self) -> int:
        """Elements between consecutive token slots of one head."""
        return self.kv_heads * self.head_dim

    @property
    def head_stride(self) -> int:
        """Elements between consecutive heads of one token slot."""
        return self.head_dim

    @property
    def shape(self) -> list[int]:
        """One layer's K (or V) as the capture's cache holds it."""
        return [1, self.max_len, self.kv_heads, self.head_dim]

    @property
    def strides(self) -> list[int]:
        """Element strides of :attr:`shape` (contiguous)."""
        return [self.max_len * self.slot_stride, self.slot_stride, self.head_stride, 1]

    @property
    def table_pages(self) -> int:
        """P, the columns of the caller's ``block_table`` [tokens, P]: pages of
        ``PAGE_TOKENS`` slots enough for every position below ``L`` (a row may address any
        position the writers accept, and none beyond: asserted by
        :func:`.falsify.table_covers`)."""
        return -(-self.max_len // PAGE_TOKENS)

    @staticmethod
    def state(layer: int, which: str) -> str:
        """The state name of layer ``layer``'s K (``which`` = ``k``) or V (``v``)."""
        return f"kv.L{layer}.{which}"

    def states(self) -> dict[str, int]:
        """Every state, in layer order, K before V: name -> bytes per token."""
        return {self.state(l, w): self.bytes_per_token
                for l in range(self.layers) for w in ("k", "v")}

    def k(self, layer: int) -> Ref:
        """Layer ``layer``'s K cache."""
        return Ref(state=self.state(layer, "k"))

    def v(self, layer: int) -> Ref:
        """Layer ``layer``'s V cache."""
        return Ref(state=self.state(layer, "v"))
