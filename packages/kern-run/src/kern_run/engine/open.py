"""``open_engine``: a loaded runtime and an :class:`~.engine.Engine` over it, from kern-run's
model options (the bundled default, or ``--manifest``/``--kernels``/``--weights``/
``--tokenizer``), the capacity chosen like the plain path (:mod:`kern_run.capacity`).

GPU only; kept thin: the checks are :mod:`kern_run.runner`'s, the engine's are its own."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from kern_manifest.contract import BATCH, BLOCK_TABLE, PAGE_TOKENS

from ..errors import KernRunError, NoGpuError
from .api import EngineConfig
from .engine import Engine


@dataclass(frozen=True)
class Opened:
    engine: Engine
    tokenizer: Any            # kern_run.tokenizer.TextTokenizer
    info: Any                 # kern_manifest.contract.ContractInfo
    capacity_line: str        # the start-up line (capacity and its KV bytes)


def paged_table_pages(manifest) -> int:
    """P (``block_table``'s 2nd dim) of a manifest with the paged contract; refuses one
    without the ``batch`` program or a ``block_table`` of a constant width."""
    bt = manifest.buffers.get(BLOCK_TABLE)
    if BATCH not in manifest.programs or bt is None:
        raise KernRunError(f"manifest `{manifest.meta.model}` has no paged KV (program "
                           f"`{BATCH}`, input `{BLOCK_TABLE}`): regenerate it with kern-gen "
                           f"(issue 20) to serve many sequences")
    if len(bt.shape) != 2 or not isinstance(bt.shape[1], int):
        raise KernRunError(f"buffer `{BLOCK_TABLE}` is {list(bt.shape)}; the contract needs "
                           f"[tokens, P] with a constant P")
    return bt.shape[1]


def open_engine(opts, *, max_seqs: int = 64, max_prefill_tokens: int = 2048,
                graphs: bool = True, runtime_factory: Callable | None = None,
                err: TextIO = sys.stderr) -> Opened:
    """``opts``: a :class:`kern_run.runner.RunOptions` (model files, ``capacity``, ``chunk``,
    ``gpu``, ``eager``); ``max_seqs`` is clamped to the manifest's ``tokens.max``."""
    from ..capacity import choose
    from ..runner import check_artifacts, probe_gpu, read_contract, resolve_model
    from ..tokenizer import load_tokenizer

    model = resolve_model(opts)
    vm, info = read_contract(model.manifest)
    width = paged_table_pages(vm.manifest)
    if info.context is not None:
        raise KernRunError("the engine needs per-token KV states; this manifest's state is "
                           "fixed (`bytes_fixed`)")
    tok = load_tokenizer(model.tokenizer)
    cap = choose(opts.capacity, info)
    if runtime_factory is None:
        arena = check_artifacts(vm, model, cap.load)
        ok, why = probe_gpu()
        if not ok:
            raise NoGpuError(f"no usable GPU here ({why}); the engine needs an NVIDIA GPU")
        from kern_runtime import Runtime, gpu_memory
        free, _ = gpu_memory(opts.gpu)
        cap = choose(opts.capacity, info, base_bytes=arena - cap.kv_bytes, free_bytes=free)
        runtime_factory = Runtime.load
    if model.default:
        from ..defaults import ensure_weights
        model.weights = [ensure_weights(model.manifest, model.plan, model.tokenizer,
                                        log=lambda s: err.write(s + "\n"))]
    rt = runtime_factory(vm, model.kernels, weights=model.weights, capacity=cap.load,
                         device=opts.gpu)
    # the pool is what was loaded (whole pages; kern_run.capacity rounds it), not less
    slots = cap.load if cap.load is not None else cap.limit
    cfg = EngineConfig(capacity=slots // PAGE_TOKENS * PAGE_TOKENS,
                       max_seqs=min(max_seqs, info.max_tokens), chunk=opts.chunk,
                       max_prefill_tokens=max_prefill_tokens, eos=frozenset(tok.eos_ids),
                       vocab=info.vocab, max_tokens=info.max_tokens, table_pages=width,
                       position_limit=info.position_limit, graphs=graphs and not opts.eager)
    try:
        engine = Engine(rt, cfg)
    except BaseException:
        getattr(rt, "close", lambda: None)()
        raise
    return Opened(engine, tok, info, cap.line())
