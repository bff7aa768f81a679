"""`kern-manifest`: verify manifests, print the JSON Schema, explain diagnostic codes.

Exit status of `verify`: 0 all clean, 1 some file failed verification, 2 some file could
not be read or decoded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .codes import CODES, explain as explain_code
from .decode import read
from .diagnostics import DecodeError, ManifestError, VerificationError, printable
from .errors import KernError, fail
from .jsonschema import json_schema
from .render import render_human, render_json
from .verify import verify as verify_manifest

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Verify kern manifests (format version 2).",
                  epilog="Exit status: 0 every manifest is clean; 1 a manifest was read and "
                         "breaks a rule; 2 a file could not be read or decoded, or bad usage.")


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@app.command()
def verify(
    files: Annotated[list[Path], typer.Argument(help="manifest.json files to verify")],
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable report")] = False,
) -> None:
    """Decode and verify each FILE; report every problem found."""
    results = []
    status = 0
    for f in files:
        stage, diags, code = None, [], 0
        try:
            diags = verify_manifest(read(f))
            stage, code = "verify", VerificationError.exit_code
        except ManifestError as err:
            stage, diags, code = "decode", err.diagnostics, err.exit_code
        if diags:
            status = max(status, code)
        results.append((str(f), stage, diags))
        if not as_json:
            if diags:
                typer.echo(render_human(diags, str(f), _text(f)), err=True, nl=False)
            else:
                typer.echo(printable(f"{f}: ok"))  # a file name may hold undecodable bytes
    if as_json:
        typer.echo(render_json(results), nl=False)
    raise typer.Exit(status)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the manifest format."""
    typer.echo(json.dumps(json_schema(), indent=2))


@app.command()
def explain(code: Annotated[str, typer.Argument(help="a diagnostic code, e.g. E0604")]) -> None:
    """Print the long form of a diagnostic code."""
    try:
        typer.echo(explain_code(code), nl=False)
    except KeyError:
        fail("kern-manifest", KernError(f"unknown code {code!r}; known codes: {', '.join(CODES)}"))


def main() -> None:
    app()


__all__ = ["DecodeError", "app", "main"]
