"""kern-run's own errors. Each message names the thing that is wrong (an option, a file, a
manifest entry) so that the CLI can print it as one line without a traceback."""

from __future__ import annotations


class KernRunError(Exception):
    """A problem kern-run found before or while running; ``str(err)`` is the whole message,
    ``problems`` every problem found in the same pass."""

    def __init__(self, *problems: str) -> None:
        self.problems = [p for p in problems if p] or ["unknown error"]
        super().__init__("\n".join(self.problems))


class ContractError(KernRunError):
    """The manifest does not follow the Qwen3/Llama caller contract (docs/caller-contract.md)."""


class NoGpuError(KernRunError):
    """No usable CUDA device here."""
