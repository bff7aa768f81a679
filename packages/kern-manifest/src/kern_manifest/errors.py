"""The root of every error a kern package raises on purpose, and how a command reports one.

A :class:`KernError` is a message that names its place (``where``), optionally a ``help``
line, a stable ``code`` and ``problems`` (further problems found in the same pass, reported
at once). ``str(err)`` is the complete message. A command line prints it with :func:`fail`,
one ``TOOL: LABEL: …`` line per entry of :meth:`KernError.lines`, and exits with the class's
:attr:`~KernError.exit_code`: 2 for bad input (the default), 1 for a failure while running.
No front end needs a traceback to tell a user what went wrong.

Each package keeps its own subclasses (and their constructors); only this root is shared.
Pure: the standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import NoReturn


class KernError(Exception):
    """A problem kern found and can name. Subclasses set :attr:`exit_code` and :attr:`label`."""

    #: The status a command line exits with: 2 bad input, 1 a failure while running.
    exit_code: int = 2
    #: The word after the tool's name on each printed line (``None``: no word).
    label: str | None = "error"
    #: Print every entry of ``problems`` as its own line (errors that are lists of equals).
    per_problem: bool = False

    def __init__(self, message: str = "", *, where: str | None = None, help: str | None = None,
                 code: str | None = None, problems: Iterable[str] = ()) -> None:
        self.message = message
        self.where = where
        self.help = help
        self.code = code
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        """The whole message: ``where: message``, each further problem, then the help."""
        text = f"{self.where}: {self.message}" if self.where else self.message
        for p in self.problems:
            text += f"\n  - {p}"
        if self.help:
            text += f"\n  help: {self.help}"
        return text

    def lines(self) -> list[str]:
        """What a command line prints, without the tool's name; an entry may span lines."""
        head = f"{self.label}: " if self.label else ""
        if self.per_problem and self.problems:
            return [head + p for p in self.problems]
        return [head + str(self)]


def fail(tool: str, err: KernError) -> NoReturn:
    """Report ``err`` on stderr as ``tool``'s one-line-per-problem message and exit with
    ``err.exit_code`` (raises :class:`SystemExit`, which command-line runners turn into the
    process status)."""
    for line in err.lines():
        sys.stderr.write(f"{tool}: {line}\n")
    sys.stderr.flush()
    raise SystemExit(err.exit_code)
