"""How many clusters of the stream GEMV (gemv_stream.cu) a GPU runs at once, by cluster size:
``cuOccupancyMaxActiveClusters`` for kern_gemv_stream_bf16 and its SiLU variant (512
threads, no dynamic shared memory) built with KERN_STREAM_CLUSTER = 2, 4 and 8.  kern-gen's
grid (gemm_stream.CLUSTERS) must not exceed it, or the last clusters wait for a second wave
(session 29: 32 clusters of 4 ran 60 % slower on an H100).

    python3 packages/kern-gen/kernels/probe_stream_clusters.py

Needs nvcc and cuda-bindings (the driver API).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import build  # noqa: E402

SYMBOLS = ("kern_gemv_stream_bf16", "kern_gemv_stream_silu_bf16")


def _check(result):
    err, *rest = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err}")
    return rest[0] if len(rest) == 1 else rest


def main() -> int:
    from cuda.bindings import driver as cu
    nvcc = build.find_nvcc()
    if nvcc is None:
        print("nvcc not found")
        return 1
    _check(cu.cuInit(0))
    dev = _check(cu.cuDeviceGet(0))
    ctx = _check(cu.cuDevicePrimaryCtxRetain(dev))
    _check(cu.cuCtxSetCurrent(ctx))
    sms = _check(cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
    print(f"{sms} SMs; most clusters resident at once (512-thread blocks):")
    for size in (2, 4, 8):
        with tempfile.TemporaryDirectory() as tmp:
            cubin = build.build_one(nvcc, HERE / "gemv_stream.cu", Path(tmp),
                                    defines=(f"KERN_STREAM_CLUSTER={size}",))
            mod = _check(cu.cuModuleLoad(str(cubin).encode()))
            for sym in SYMBOLS:
                fn = _check(cu.cuModuleGetFunction(mod, sym.encode()))
                cfg = cu.CUlaunchConfig()
                cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = size * 64, 1, 1
                cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 512, 1, 1
                cfg.sharedMemBytes, cfg.numAttrs = 0, 0
                n = _check(cu.cuOccupancyMaxActiveClusters(fn, cfg))
                print(f"  cluster of {size}: {sym}: {n} clusters ({n * size} blocks)")
            _check(cu.cuModuleUnload(mod))
    return 0


if __name__ == "__main__":
    sys.exit(main())
