"""The ``kern-gen`` command line: one Typer app; each subcommand registers on ``app``.

Add a command with ``app.command("NAME")(function)`` below (the function can live in its
own module, as ``export`` does).
"""

from __future__ import annotations

import typer

from .dspark.command import dspark_command
from .export import export_command
from .llama.command import llama_command, qwen3_command

app = typer.Typer(
    name="kern-gen",
    help="kern-gen: model manifest generators and weight export for kern.",
    epilog="Exit status: 0 written; 2 refused (an input could not be read, a mined fact "
           "does not hold, or bad usage; one line names the place); nothing is written then.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """kern-gen: model manifest generators and weight export for kern."""


app.command("export")(export_command)
app.command("llama")(llama_command)
app.command("qwen3")(qwen3_command)
app.command("dspark")(dspark_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
