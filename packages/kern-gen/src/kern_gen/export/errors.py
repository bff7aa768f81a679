"""The one error type of ``kern-gen export``: a message that names the place."""

from __future__ import annotations


class ExportError(Exception):
    """Export cannot go on. ``problems`` holds one line per problem (at least one); the CLI
    prints each as an ``error:`` line and exits 2."""

    def __init__(self, *problems: str) -> None:
        if not problems:
            raise ValueError("ExportError needs at least one problem")
        self.problems = list(problems)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(problems[0] + more)
