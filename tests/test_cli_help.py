"""Every kern command line states its exit statuses in ``--help`` (issue 17, item 12): one
convention, 0 ok, 1 the input was read and is wrong or the run failed, 2 the input could not
be read or the usage is wrong."""

import pytest
from typer.testing import CliRunner

from kern_gen.cli import app as gen_app
from kern_manifest.cli import app as manifest_app
from kern_mine.cli import app as mine_app
from kern_run.cli import app as run_app
from kern_serve.cli import app as serve_app


@pytest.mark.parametrize("app", [manifest_app, mine_app, gen_app, run_app, serve_app],
                         ids=["kern-manifest", "kern-mine", "kern-gen", "kern-run",
                              "kern-serve"])
def test_help_states_the_exit_statuses(app):
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "Exit status: 0 " in text and " 2 " in text, text
