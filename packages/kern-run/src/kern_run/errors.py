"""kern-run's own errors. Each message names the thing that is wrong (an option, a file, a
manifest entry) so that the CLI can print it as one line without a traceback."""

from __future__ import annotations

from kern_manifest import KernError
# The caller contract's error lives with the contract (kern_manifest.contract); kern-run's
# old name for it stays.
from kern_manifest.contract import ContractError

__all__ = ["ContractError", "KernRunError", "NoGpuError"]


class KernRunError(KernError):
    """A problem kern-run found before or while running; ``str(err)`` is the whole message,
    ``problems`` every problem found in the same pass (the CLI prints one ``error:`` line
    each and exits 2)."""

    per_problem = True

    def __init__(self, *problems: str) -> None:
        found = [p for p in problems if p] or ["unknown error"]
        super().__init__(found[0], problems=found)

    def render(self) -> str:
        return "\n".join(self.problems)


class NoGpuError(KernRunError):
    """No usable CUDA device here (the CLI prints the message as it is and exits 1)."""

    exit_code = 1
    label = None
    per_problem = False
