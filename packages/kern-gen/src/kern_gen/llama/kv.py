"""The KV state's layout: one place for the cache arithmetic.

The captured cache writers bake HF StaticCache's layout in: per layer, K and V are each
``[1, kv_heads, max_len, head_dim]`` bf16, contiguous (their only scalars are token counts and
head sizes; the strides are compiled in).  The state ``kv`` is ``bytes_fixed`` = 2 x layers x
that block: layer ``l``'s K at ``2l x block`` bytes, V at ``(2l + 1) x block``; the own
attention kernels are told the same strides (slot ``head_dim``, head ``max_len x head_dim``
elements).  :func:`.falsify.cache_layout` asserts the sidecar's cache tensors have it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ModelConfig
from .ir import KV, Ref

ELEM_BYTES = 2          # bf16


@dataclass(frozen=True)
class KVLayout:
    layers: int
    kv_heads: int
    max_len: int
    head_dim: int
    dtype: str = "bfloat16"       # the sidecar's (torch) name of the element type

    @classmethod
    def of(cls, cfg: ModelConfig, max_len: int) -> KVLayout:
        return cls(cfg.layers, cfg.kv_heads, max_len, cfg.head_dim)

    @property
    def block(self) -> int:
        """Bytes of one layer's K (or V)."""
        return self.kv_heads * self.max_len * self.head_dim * ELEM_BYTES

    @property
    def total_bytes(self) -> int:
        """The state's ``bytes_fixed``: K and V of every layer."""
        return 2 * self.layers * self.block

    @property
    def slot_stride(self) -> int:
        """Elements between consecutive positions of one head."""
        return self.head_dim

    @property
    def head_stride(self) -> int:
        """Elements between consecutive heads of one layer's K (or V)."""
        return self.max_len * self.head_dim

    @property
    def shape(self) -> list[int]:
        """One layer's K (or V) as HF StaticCache holds it."""
        return [1, self.kv_heads, self.max_len, self.head_dim]

    @property
    def strides(self) -> list[int]:
        """Element strides of :attr:`shape` (contiguous)."""
        return [self.kv_heads * self.head_stride, self.head_stride, self.slot_stride, 1]

    def k(self, layer: int) -> Ref:
        """Layer ``layer``'s K cache in the state."""
        return Ref(state=KV, offset=2 * layer * self.block)

    def v(self, layer: int) -> Ref:
        """Layer ``layer``'s V cache in the state."""
        return Ref(state=KV, offset=(2 * layer + 1) * self.block)
