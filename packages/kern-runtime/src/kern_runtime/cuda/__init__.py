"""The one seam that touches the GPU: CUDA driver calls (through ``cuda.bindings.driver``),
module loading and function lookup, device and pinned memory, launches, graphs and the
cuBLASLt externs (through ``nvmath.bindings.cublasLt``). :class:`.device.CudaDevice`
presents them to the runtime as a :class:`kern_runtime.device.Device`.

Nothing here is imported by ``import kern_runtime``; the runtime imports these modules when
it loads a manifest, so the package works on machines without a GPU or libcuda.
"""
