"""The bench's torch side runs in child processes (:mod:`kern_run.bench.torch_side`): the JSON
result protocol and its errors, the profile's input writes. CPU only; nothing here imports
torch."""

import json
import sys

import pytest

from kern_run.bench import torch_side
from kern_run.bench.torch_side import (PROFILE_POS, checkpoint_in_child, child_cmd, child_json,
                                       main, profile_decode, run_spec)
from kern_run.errors import KernRunError


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_child_result_is_the_last_stdout_line():
    code = "import json; print('progress 1/2'); print(json.dumps({'ok': True, 'decode_ms': 2.5}))"
    assert child_json(py(code), "baseline", 60) == {"decode_ms": 2.5}


def test_child_reported_failure_names_what_and_why():
    code = "import json; print(json.dumps({'ok': False, 'error': 'OutOfMemoryError: 80 GiB'}))"
    with pytest.raises(KernRunError, match=r"^baseline: OutOfMemoryError: 80 GiB$"):
        child_json(py(code), "baseline", 60)


@pytest.mark.parametrize("code, exit_code", [
    ("import sys; print('half a line'); sys.exit(3)", 3),   # died without a result
    ("print('[1, 2]')", 0),                                  # JSON, but not an object
    ("pass", 0),                                             # nothing at all
])
def test_child_without_result_line(code, exit_code):
    with pytest.raises(KernRunError, match=rf"^baseline: the child process exited {exit_code} "
                                           r"without a JSON result line$"):
        child_json(py(code), "baseline", 60)


def test_child_timeout():
    with pytest.raises(KernRunError, match=r"^baseline: the child process ran past 0.5 s$"):
        child_json(py("import time; time.sleep(30)"), "baseline", 0.5)


def test_real_child_reports_an_unknown_op_as_one_line():
    with pytest.raises(KernRunError, match=r"^baseline: KernRunError: unknown op 'nope' "
                                           r"\(decode, checkpoint, "
                                           r"profile, lookup\)$"):
        child_json(child_cmd({"op": "nope"}), "baseline", 120)


def test_main_prints_one_json_line_and_exit_status(capsys):
    assert main(["{\"op\": \"nope\"}"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == {"ok": False,
                                   "error": "KernRunError: unknown op 'nope' (decode, checkpoint, "
                                            "profile, lookup)"}
    assert main([]) == 1
    assert "usage: python -m kern_run.bench SPEC_JSON" in capsys.readouterr().out
    assert main(["{not json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"].startswith("JSONDecodeError: ")


def test_run_spec_rejects_an_unknown_op():
    with pytest.raises(KernRunError, match="unknown op None"):
        run_spec({})


def test_existing_checkpoint_starts_no_child(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr("kern_run.bench.torch_side.child_json",
                        lambda *a: pytest.fail("a child was started"))
    assert checkpoint_in_child(tmp_path, {"model_type": "qwen3"}) == tmp_path


def test_profile_decode_sets_the_decode_position_first(monkeypatch):
    """The profiled step runs at PROFILE_POS whatever the inputs held before (a fresh load
    holds position 0: the attention's share depends on it)."""
    import kern_run.bench.profile as prof_mod

    calls = []

    class FakeRt:
        def write(self, name, arr):
            calls.append((name, arr.dtype.name, arr.tolist()))

    def fake_record(rt, program, symbols, gpu):
        calls.append(("record", program, symbols, gpu))
        return [("k", 0.0, 1.0)]
    monkeypatch.setattr(prof_mod, "record_program", fake_record)
    assert profile_decode(FakeRt(), 3) == [("k", 0.0, 1.0)]
    p = PROFILE_POS
    assert calls == [("block_table", "int32", [[0]]), ("token_ids", "int64", [1]),
                     ("positions", "int64", [p]), ("slots", "int64", [p]),
                     ("pos0", "int32", [p]), ("kv_lens", "int32", [p + 1]),
                     ("record", "decode", {"tokens": 1}, 3)]


def test_profile_in_child_spec(monkeypatch, tmp_path):
    seen = {}

    def fake_child_json(cmd, what, timeout_s):
        seen["spec"], seen["what"] = json.loads(cmd[-1]), what
        return {"events": [], "steps": 20}
    monkeypatch.setattr(torch_side, "child_json", fake_child_json)
    torch_side.profile_in_child(tmp_path / "m.json", tmp_path / "k", [tmp_path / "w"], None, 1)
    assert seen == {"what": "decode profile", "spec": {
        "op": "profile", "manifest": str(tmp_path / "m.json"), "kernels": str(tmp_path / "k"),
        "weights": [str(tmp_path / "w")], "capacity": None, "gpu": 1}}
