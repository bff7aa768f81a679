"""The errors of kern-weights, each a message that names the place: :class:`ExportError`
(weight export, ``kern-gen export``), :class:`HeaderError` (a safetensors header that cannot
be read; each caller words it as its own error) and :class:`GGUFError` (GGUF metadata that
cannot be read)."""

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


class HeaderError(KernError):
    """A safetensors file whose header cannot be used. ``path`` is the file; ``message``
    what is wrong with it as a whole (with an optional ``help``), or, for bad tensor entries,
    ``problems``: one line per entry, every one found."""

    def __init__(self, path: str, message: str, *, help: str | None = None,
                 problems: list[str] | None = None) -> None:
        self.path = path
        super().__init__(message, where=f"`{path}`", help=help, problems=problems or ())


class GGUFError(KernError):
    """GGUF metadata that cannot be read; the message starts with the file (``GGUF `path`: …``)."""
