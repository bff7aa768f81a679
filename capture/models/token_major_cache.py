"""A static KV cache whose storage is token-major: the capture driver's capacity-free layout.

Why (issue 13): transformers' ``StaticCache`` stores each layer's K and V head-major,
``[B, kv_heads, L, D]``, so the compiled cache writers address ``d + D*pos + L*D*head``: the
capacity ``L`` is a stride inside every mined writer and a manifest built from it has one
fixed context.  Here each layer's storage is ``[B, L, kv_heads, D]``, contiguous; a writer
then stores at ``d + D*head + kv_heads*D*slot`` (no ``L`` in any address, only in Inductor's
bounds check ``0 <= slot < L``), so the replayed writers work for any number of token slots
up to the ``L`` the capture was made with (the model's own position limit).

Contract of one forward (the driver calls :meth:`TokenMajorCache.feed` first):

- ``slots``: i64 ``[tokens]``, the cache row each new token is written to.  A tensor the
  driver makes, not derived inside the compiled graph, so each writer loads one slot per row
  (a batched engine can scatter rows to any slot); the driver also passes ``position_ids``
  (for rope) as a separate tensor with equal values.
- ``offset``: i64 scalar, a static-address tensor holding the first position; transformers'
  mask builder reads it as the query offset (``get_seq_length``).  It is set by a host copy,
  so no per-layer ``cumulative_length`` counter kernels are compiled.

Attention receives ``storage.transpose(1, 2)`` views (``[B, kv_heads, L, D]``, strides
``[L*kv_heads*D, D, kv_heads*D, 1]``).  The writes go to the storage itself: updating a
transposed view instead makes Inductor copy the whole cache per layer per forward.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, StaticLayer

LAYOUT = "token-major"


class TokenMajorLayer(StaticLayer):
    """One layer: ``keys`` / ``values`` are the token-major storages ``[B, L, kv_heads, D]``."""

    def __init__(self, max_cache_len: int, owner: TokenMajorCache) -> None:
        super().__init__(max_cache_len)
        self._owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.batch_size, self.num_heads = key_states.shape[:2]
        self.k_head_dim, self.v_head_dim = key_states.shape[-1], value_states.shape[-1]
        shape = (self.batch_size, self.max_cache_len, self.num_heads)
        self.keys = torch.zeros((*shape, self.k_head_dim), dtype=self.dtype, device=self.device)
        self.values = torch.zeros((*shape, self.v_head_dim), dtype=self.dtype, device=self.device)
        if not torch.compiler.is_compiling():    # (the driver initialises eagerly first)
            torch._dynamo.mark_static_address(self.keys)
            torch._dynamo.mark_static_address(self.values)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """key/value_states ``[B, kv_heads, tokens, D]`` -> rows ``slots`` of the storage;
        returns head-major views of the whole storage."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        slots = self._owner.slots
        self.keys.index_copy_(1, slots, key_states.transpose(1, 2))
        self.values.index_copy_(1, slots, value_states.transpose(1, 2))
        return self.keys.transpose(1, 2), self.values.transpose(1, 2)

    def get_seq_length(self) -> torch.Tensor:
        return self._owner.offset

    def reset(self) -> None:
        if self.is_initialized:
            self.keys.zero_()
            self.values.zero_()


class TokenMajorCache(Cache):
    """All layers' token-major storages plus the per-forward ``slots`` and ``offset``."""

    def __init__(self, num_layers: int, max_cache_len: int, device: str) -> None:
        self.max_len = max_cache_len
        self.slots: torch.Tensor | None = None
        self.offset = torch.zeros((), dtype=torch.long, device=device)
        torch._dynamo.mark_static_address(self.offset)
        super().__init__(layers=[TokenMajorLayer(max_cache_len, self) for _ in range(num_layers)])

    def feed(self, pos: int, tokens: int, device: str) -> torch.Tensor:
        """Set up a forward of ``tokens`` tokens at positions ``pos ..``: returns the
        ``position_ids`` [1, tokens] to pass to the model (a tensor distinct from ``slots``)."""
        if pos + tokens > self.max_len:
            raise ValueError(f"positions {pos}..{pos + tokens - 1} exceed the cache ({self.max_len})")
        rows = list(range(pos, pos + tokens))
        self.slots = torch.tensor(rows, dtype=torch.long, device=device)
        self.offset.copy_(torch.tensor(pos, dtype=torch.long))    # a host copy, no kernel
        return torch.tensor([rows], dtype=torch.long, device=device)

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every layer's storage, named ``layers.<i>.keys|values``."""
        return [(f"layers.{i}.{attr}", getattr(layer, attr)) for i, layer in enumerate(self.layers)
                for attr in ("keys", "values") if layer.is_initialized]
