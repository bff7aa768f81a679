"""kern-runtime: load a verified kern manifest and replay it on the GPU.

Raw launches through ``cuda.bindings.driver``, the cuBLASLt GEMM externs through ctypes,
CUDA graphs keyed by (program, symbol values). ``import kern_runtime`` never touches the
GPU: the CUDA backend (:mod:`kern_runtime.cuda`) is imported when a manifest is loaded.

    from kern_runtime import Runtime
    with Runtime.load("manifest.json", "kernels/", weights=["w.safetensors"], capacity=2048) as rt:
        rt.write("tokens_in", ids)
        rt.run("decode", {"tokens": 1})
        out = rt.read("next_token")
"""

from .errors import (CallerError, CudaError, KernelArtifactError, KernRuntimeError,
                     ManifestProblem, WeightArtifactError)
from .hostdata import HOST_DTYPES, from_bf16, to_bf16
from .prepare import Prepared, prepare
from .probe import gpu_available, gpu_memory
from .runtime import Runtime
from .mailbox import Mailbox
from .sequence import Copy, Load, Run, Store

__version__ = "0.1.0"

__all__ = [
    "HOST_DTYPES", "CallerError", "Copy", "CudaError", "KernRuntimeError", "KernelArtifactError",
    "Load", "Mailbox", "ManifestProblem", "Prepared", "Run", "Runtime", "Store",
    "WeightArtifactError", "from_bf16",
    "gpu_available", "gpu_memory", "prepare", "to_bf16",
]
