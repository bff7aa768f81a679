"""kern-run: the end-to-end caller of Qwen3/Llama-family kern manifests
(docs/caller-contract.md) — chunked prefill, graph decode, greedy — and its benchmark.

``import kern_run`` touches no GPU; the runtime is loaded by :mod:`kern_run.runner`."""

from .errors import ContractError, KernRunError, NoGpuError
from .generate import Result, generate
from .chunks import Call, plan_prompt

__version__ = "0.1.0"

__all__ = ["Call", "ContractError", "KernRunError", "NoGpuError", "Result", "generate",
           "plan_prompt"]
