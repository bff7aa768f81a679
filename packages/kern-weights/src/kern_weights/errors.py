"""The one error type of weight export (``kern-gen export``): a message that names the place."""

from __future__ import annotations

from kern_manifest import KernError


class ExportError(KernError):
    """Export cannot go on. ``problems`` holds one line per problem (at least one); the CLI
    prints each as an ``error:`` line and exits 2."""

    per_problem = True

    def __init__(self, *problems: str) -> None:
        if not problems:
            raise ValueError("ExportError needs at least one problem")
        super().__init__(problems[0], problems=problems)

    def render(self) -> str:
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return self.problems[0] + more
