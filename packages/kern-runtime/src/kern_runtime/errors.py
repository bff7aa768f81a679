"""Runtime errors, grouped by who must act.

Every error names the place it is about (kernel and step, program and dispatch label, cubin
file, weight name, CUDA call) in ``where`` and says what to do in ``help`` when that is not
obvious. ``str(err)`` is the complete one-paragraph message a front end prints; no front end
should need a traceback to tell a user what went wrong.

| class                  | who acts           | examples                                            |
|------------------------|--------------------|-----------------------------------------------------|
| ManifestProblem        | manifest author    | did not verify; a state offset beyond the capacity  |
| KernelArtifactError    | kernel provider    | cubin missing, sha256 mismatch, symbol or layout    |
| WeightArtifactError    | weight provider    | tensor missing, ambiguous, wrong dtype or shape     |
| CallerError            | code using the API | symbol out of range, unknown buffer, wrong dtype    |
| CudaError              | environment / CUDA | a driver or cuBLASLt call failed                    |
"""

from __future__ import annotations

from kern_manifest import KernError


class KernRuntimeError(KernError):
    """Base of every error the runtime raises on purpose. A command reports it whole (its
    first line names who must act) and exits 1: the run failed."""

    #: Who must act, as shown at the start of the message.
    who = "runtime"
    exit_code = 1
    label = None

    def __init__(self, message: str, *, where: str | None = None, help: str | None = None,
                 problems: list[str] | None = None, code: str | None = None) -> None:
        # ``problems``: further problems of the same kind found in the same pass; ``code``:
        # a status name (CudaError), kept as :attr:`code`.
        super().__init__(message, where=where, help=help, problems=problems or (), code=code)

    def render(self) -> str:
        return f"[{self.who}] " + super().render()


class ManifestProblem(KernRuntimeError):
    """The manifest did not verify, or cannot be served as configured (e.g. a state offset
    beyond the state size at the chosen capacity)."""

    who = "manifest"


class KernelArtifactError(KernRuntimeError):
    """A kernel binary does not match the manifest: missing or unreadable cubin, sha256
    mismatch, symbol not found, parameter layout different from the declared ``params``."""

    who = "kernel artifact"


class WeightArtifactError(KernRuntimeError):
    """The weight files do not provide what the manifest's ``weight`` buffers declare."""

    who = "weight artifact"


class CallerError(KernRuntimeError, ValueError):
    """The API was called wrongly: symbol values out of range, unknown names, a write of the
    wrong dtype or too many bytes, a missing capacity."""

    who = "caller"


class CudaError(KernRuntimeError):
    """A CUDA driver or cuBLASLt call failed. ``call`` is the function, ``code`` its status
    name (e.g. ``CUDA_ERROR_OUT_OF_MEMORY``)."""

    who = "CUDA"

    def __init__(self, call: str, code: str, detail: str = "", *, where: str | None = None,
                 help: str | None = None) -> None:
        self.call = call
        msg = f"{call} failed with {code}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg, where=where, help=help, code=code)   # KernError keeps `code`


# --- place names --------------------------------------------------------------------------
# One spelling for each kind of place, so messages are greppable and consistent.

def kernel_step(kernel: str, step: int, symbol: str | None = None) -> str:
    s = f"kernel `{kernel}` step {step}"
    return f"{s} (`{symbol}`)" if symbol else s


def dispatch(program: str, index: int, label: str | None = None) -> str:
    s = f"program `{program}` dispatch {index}"
    return f"{s} (`{label}`)" if label else s


def cubin(name: str) -> str:
    return f"cubin `{name}`"


def weight(name: str) -> str:
    return f"weight `{name}`"
