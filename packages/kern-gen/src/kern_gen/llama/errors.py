"""The one error the generator raises for a falsified wiring assumption."""

from __future__ import annotations

from kern_manifest import KernError


class WiringError(KernError):
    """A fact of the capture/sidecar/config differs from what the wiring assumes.

    The message names the call site (program, site index, kernel, layer/role) and the fact
    that differed; nothing is written when it is raised. A command prints it as
    ``refused: …`` and exits 2."""

    label = "refused"
