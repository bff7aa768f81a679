"""``kern-mine CAPTURE [--json OUT] [--request N]``: parse, call ``mine()``, render.

Exit status: 0 mined; 1 the output could not be written; 2 bad input or usage (the message
names the file and, where known, the line)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from kern_manifest import KernError, fail

from . import Options, encode_json, mine, render_report

app = typer.Typer(add_completion=False, help=__doc__)


@app.command()
def run(
    capture: Annotated[Path, typer.Argument(help="capture directory, pid-* base directory, or launches.jsonl[.gz|.xz|.zst]")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="write the mined facts (MINED.md) here; '-' = stdout")] = None,
    request: Annotated[Optional[int], typer.Option("--request", help="mine only the forwards of request N (0-based)")] = None,
    gap_ms: Annotated[float, typer.Option(help="time gap separating requests")] = 5.0,
    min_repeats: Annotated[int, typer.Option(help="byte-identical repetitions that mark a benchmark run (<=1: off)")] = 8,
    min_distinct: Annotated[int, typer.Option(min=1, help="distinct token counts a non-constant fit needs")] = 3,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no report on stdout")] = False,
) -> None:
    """Mine a CUPTI capture (capture/FORMAT.md): forward passes, the token
    reference, fitted launch expressions, pointer classes, replayability.

    Prints the report, or writes the versioned JSON (MINED.md) with --json.

    Exit status: 0 mined (warnings, e.g. a partial last line dropped, on stderr);
    1 the output could not be written; 2 the capture is missing, unreadable,
    corrupt, truncated or empty, or the usage is wrong. Errors name the file
    and, where known, the line.
    """
    if not math.isfinite(gap_ms) or gap_ms < 0:
        raise typer.BadParameter("must be a finite number of milliseconds >= 0", param_hint="'--gap-ms'")
    opts = Options(gap_ms=gap_ms, min_repeats=min_repeats, min_distinct=min_distinct, request=request)
    try:
        mined = mine(capture, opts)
    except KernError as e:
        fail("kern-mine", e)
    for w in mined.warnings:
        typer.echo(f"kern-mine: warning: {w}", err=True)
    if json_out is not None and str(json_out) == "-":
        typer.echo(encode_json(mined).decode(), nl=False)
        return
    if not quiet:
        typer.echo(render_report(mined), nl=False)
    if json_out is not None:
        try:
            json_out.write_bytes(encode_json(mined))
        except OSError as e:
            typer.echo(f"kern-mine: error: cannot write {json_out}: {e.strerror or e}", err=True)
            raise typer.Exit(1) from None


def main() -> None:
    app()
