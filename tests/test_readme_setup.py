"""The README's two set-up commands: `.ci/run` runs exactly the second, and neither asks pip
to install into the interpreter's own environment (refused on Debian/Ubuntu's system Python:
PEP 668, `externally-managed-environment`). Both were run as written on a stock Debian 12
(python3 3.11.2 + python3-pip, a debootstrap chroot): docs/measurements.md."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [b.strip() for b in blocks]


def test_ci_runs_exactly_the_readme_test_command():
    setup, tests = _quick_start_commands()[:2]
    ci = [ln for ln in (ROOT / ".ci/run").read_text().splitlines()
          if ln and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert ci == [tests]
    assert "kern-run" in setup and "pytest" in tests


def test_setup_never_installs_into_the_system_python():
    for cmd in _quick_start_commands()[:2]:
        for part in cmd.split("&&"):
            words = shlex.split(part)
            if words[:4] == ["python3", "-m", "pip", "install"]:
                assert "--target" in words, part          # PEP 668 does not apply there
                assert "--break-system-packages" not in words, part
            if words and words[0].endswith("uv") and words[0] != ".uv/bin/uv":
                raise AssertionError(f"`{part.strip()}` relies on a uv on PATH")
