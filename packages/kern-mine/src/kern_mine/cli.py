"""``kern-mine CAPTURE [--json OUT] [--request N]``: parse, call ``mine()``, render.

Exit status: 0 mined; 2 bad input (the message names the file and, where known, the line)."""

from __future__ import annotations

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
    min_distinct: Annotated[int, typer.Option(help="distinct token counts a non-constant fit needs")] = 3,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no report on stdout")] = False,
) -> None:
    opts = Options(gap_ms=gap_ms, min_repeats=min_repeats, min_distinct=min_distinct, request=request)
    try:
        mined = mine(capture, opts)
    except KernError as e:
        fail("kern-mine", e)
    if json_out is not None and str(json_out) == "-":
        typer.echo(encode_json(mined).decode(), nl=False)
        return
    if not quiet:
        typer.echo(render_report(mined), nl=False)
    if json_out is not None:
        json_out.write_bytes(encode_json(mined))


def main() -> None:
    app()
