"""``kern-gen llama`` / ``kern-gen qwen3``: manifests for Llama-family models (SmolLM2, Qwen3 =
Llama + per-head q/k RMSNorm) from a capture of HF transformers under ``torch.compile``.

Modules, in pipeline order:

- :mod:`.config`    the model config (HF ``config.json`` keys) and its comparison with the
                    captured run's config;
- :mod:`.facts`     capture + kern-mine result + provider sidecar, read into per-site facts
                    (pointers named against the sidecar, scalar fits, parameter ABI);
- :mod:`.ir`        ops, buffer refs (``Ref``: a buffer or a named state), programs, the
                    dataflow check;
- :mod:`.arch`      one record per model family (roles, q/k kernel layouts and literals),
                    ``ARCHS``; :mod:`.qwen3` holds Qwen3's differences;
- :mod:`.kv`        the KV states' layout (one per-token state per layer's K and V, strides,
                    bytes per token);
- :mod:`.writers`   the mined cache writers are capacity-free: bound in the cubin, store
                    arithmetic and pointer directions from Inductor's code log;
- :mod:`.wiring`    the hand-written wiring: the walk over the captured call sites;
- :mod:`.roles`     one handler per role: what a captured site does, per layer; it *asserts*
                    every fact it relies on (:mod:`.falsify`) and yields ops;
- :mod:`.programs`  ``PROGRAMS``: each program cut from one captured graph;
- :mod:`.merge`     merged q/k/v and gate/up projections;
- :mod:`.assemble`  ops -> manifest (``EMIT``: mined kernels, :mod:`.gemm`, :mod:`.own`),
                    export plan, kernels directory (mined + own cubins);
- :mod:`.gemm`      the GEMMs' kernels: one interface, ``GEMM_IMPLS`` (cuBLASLt, the own
                    GEMV for the few-row programs: ``--gemm``);
- :mod:`.readme`    the generation report (the example's README.md);
- :mod:`.pipeline`  facts -> programs -> manifest, plan, cubins, report; writing;
- :mod:`.repo`      the kern checkout's files (own kernel sources, presets), found from
                    anywhere;
- :mod:`.command`   the thin Typer commands.
"""

from .errors import WiringError
from .pipeline import generate

__all__ = ["WiringError", "generate"]
