"""``KernError`` (the root of kern's errors) and ``fail`` (how a command reports one)."""

from __future__ import annotations

import pytest

from kern_manifest import DecodeError, Diagnostic, KernError, VerificationError, fail


def test_message_names_place_problems_and_help():
    err = KernError("2 problems", where="weights", help="give every weight",
                    problems=["`a`: missing", "`b`: wrong dtype"], code="W1")
    assert str(err) == ("weights: 2 problems\n  - `a`: missing\n  - `b`: wrong dtype\n"
                        "  help: give every weight")
    assert (err.message, err.where, err.code) == ("2 problems", "weights", "W1")
    assert err.lines() == ["error: " + str(err)]
    assert str(KernError("plain")) == "plain" and KernError("x").exit_code == 2


def test_fail_prints_each_line_with_the_tool_and_exits(capsys):
    class Listed(KernError):
        per_problem = True
        label = "refused"
        exit_code = 1

    with pytest.raises(SystemExit) as e:
        fail("kern-x", Listed("first", problems=["first", "second"]))
    assert e.value.code == 1
    assert capsys.readouterr().err == "kern-x: refused: first\nkern-x: refused: second\n"
    with pytest.raises(SystemExit) as e:
        fail("kern-x", KernError("bad input", where="`m.json`"))
    assert e.value.code == 2
    assert capsys.readouterr().err == "kern-x: error: `m.json`: bad input\n"


def test_manifest_errors_keep_their_summary_and_exit_codes():
    d = [Diagnostic("E0604", "dtype mismatch", "buffers.h"), Diagnostic("E0801", "unused", "b")]
    err = VerificationError(d, "m.json")
    assert str(err) == "m.json: E0604 at buffers.h: dtype mismatch (and 1 more)"
    assert isinstance(err, KernError) and err.code == "E0604" and err.exit_code == 1
    assert DecodeError(d[:1]).exit_code == 2 and str(DecodeError([])) == "invalid manifest"
