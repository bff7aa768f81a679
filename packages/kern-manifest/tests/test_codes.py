"""One test per diagnostic code not covered by the spec's mutation list: each mutation of the
toy manifest yields exactly the expected (code, path) pairs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kern_manifest import CODES, DecodeError, read

D = "programs.step.dispatches"
NORM = "kernels.norm"
EN = "kernels.energy"


def norm_step(doc):
    return doc["kernels"]["norm"]["impl"]["steps"][0]


def en_steps(doc):
    return doc["kernels"]["energy"]["impl"]["steps"]


def dargs(doc, i):
    return doc["programs"]["step"]["dispatches"][i]["args"]


def _nested_expr(depth):
    e = {"sym": "tokens"}
    for _ in range(depth - 1):
        e = {"mul": [e, 2]}
    return e


def _set(path_fn, value):
    return lambda doc: path_fn(doc, value)


CASES = {
    # E00xx: decode
    "E0005": (lambda d: d["buffers"]["h"].pop("class"), {("E0005", "buffers.h")}),
    "E0006": (lambda d: d["buffers"]["h"].update(dtype="bf17"), {("E0006", "buffers.h.dtype")}),
    "E0006-arg-two-keys": (lambda d: dargs(d, 0).__setitem__(3, {"sym": "tokens", "i32": 1}),
                           {("E0006", f"{D}[0].args[3]")}),
    "E0006-offset-on-literal": (lambda d: dargs(d, 0).__setitem__(3, {"i32": 1, "offset": 4}),
                                {("E0006", f"{D}[0].args[3]")}),
    "E0004-nested": (lambda d: norm_step(d).update(grdi=[1, 1, 1]),
                     {("E0004", f"{NORM}.impl.steps[0].grdi")}),
    "E0004-scratch": (lambda d: d["kernels"]["energy"]["impl"]["scratch"]["part"].update(x=1),
                      {("E0004", f"{EN}.impl.scratch.part.x")}),
    "E0007-dtype": (lambda d: norm_step(d)["params"].__setitem__(3, "in buffer<f64>"),
                    {("E0007", f"{NORM}.impl.steps[0].params[3]")}),
    "E0008": (lambda d: d["buffers"]["h"].update(dtype="\udfff"), {("E0008", "buffers.h.dtype")}),
    "E0009": (lambda d: dargs(d, 1).__setitem__(3, {"expr": _nested_expr(17)}),
              {("E0009", f"{D}[1].args[3].expr")}),
    "E0010-int": (lambda d: d["symbols"]["tokens"].update(max=10**100),
                  {("E0010", "symbols.tokens.max")}),
    "E0010-nan": (lambda d: en_steps(d)[1]["args"].__setitem__(2, {"f32": float("nan")}),
                  {("E0010", f"{EN}.impl.steps[1].args[2].f32")}),
    # E01xx: header
    "E0101": (lambda d: d["meta"].update(version=3), {("E0101", "meta.version")}),
    "E0102-min-above-max": (lambda d: d["symbols"]["tokens"].update(min=300),
                            {("E0102", "symbols.tokens.min")}),
    "E0102-max-zero": (lambda d: d["symbols"]["tokens"].update(max=0, min=0),
                       {("E0102", "symbols.tokens.max"), ("E0403", f"{NORM}.impl.steps[0].grid[0]"),
                        ("E0403", f"{EN}.impl.steps[0].grid[0]"),
                        ("E0403", f"{EN}.impl.steps[1].grid[0]")}),
    "E0103-both": (lambda d: d["states"]["cache"].update(bytes_fixed=64),
                   {("E0103", "states.cache")}),
    "E0103-negative": (lambda d: d["states"]["cache"].update(bytes_per_token=-1),
                       {("E0103", "states.cache.bytes_per_token")}),
    "E0104": (lambda d: d["states"]["cache"].update(align=96), {("E0104", "states.cache.align")}),
    "E0105": (lambda d: d["states"]["cache"].update(bytes_per_token=2**200),
              {("E0105", "states.cache.bytes_per_token")}),
    # E02xx: shapes
    "E0201-empty": (lambda d: d["buffers"]["gamma"].update(shape=[]),
                    {("E0201", "buffers.gamma.shape")}),
    "E0201-zero": (lambda d: d["buffers"]["gamma"].update(shape=[0]),
                   {("E0201", "buffers.gamma.shape[0]")}),
    "E0202": (lambda d: d["buffers"]["h"].update(shape=["tokenz", 128]),
              {("E0202", "buffers.h.shape[0]")}),
    "E0203": (lambda d: d["buffers"]["gamma"].update(shape=[2**62, 2**3]),
              {("E0203", "buffers.gamma")}),
    "E0204-index-into": (lambda d: d["buffers"]["x"].update(domain={"index_into": "nope"}),
                         {("E0204", "buffers.x.domain.index_into")}),
    "E0204-monotone": (lambda d: d["buffers"]["x"].update(domain={"monotone": True}),
                       {("E0204", "buffers.x.domain.monotone")}),
    # E03xx: expressions
    "E0301-unknown-symbol": (lambda d: norm_step(d)["grid"].__setitem__(1, {"sym": "nope"}),
                             {("E0301", f"{NORM}.impl.steps[0].grid[1]")}),
    "E0301-overflow": (lambda d: dargs(d, 1).__setitem__(
        3, {"expr": {"mul": [{"sym": "tokens"}, 2**60]}}), {("E0301", f"{D}[1].args[3].expr")}),
    # E04xx: steps
    "E0401-zero": (lambda d: norm_step(d).update(block=[0, 1, 1]),
                   {("E0401", f"{NORM}.impl.steps[0].block")}),
    "E0401-z": (lambda d: norm_step(d).update(block=[1, 1, 65]),
                {("E0401", f"{NORM}.impl.steps[0].block[2]")}),
    "E0402": (lambda d: norm_step(d)["grid"].__setitem__(1, {"mul": [{"sym": "tokens"}, 1024]}),
              {("E0402", f"{NORM}.impl.steps[0].grid[1]")}),
    "E0403": (lambda d: norm_step(d)["grid"].__setitem__(2, 0),
              {("E0403", f"{NORM}.impl.steps[0].grid[2]")}),
    "E0404": (lambda d: en_steps(d)[1].update(shared_mem={"mul": [{"sym": "tokens"}, 1024]}),
              {("E0404", f"{EN}.impl.steps[1].shared_mem")}),
    "E0405": (lambda d: norm_step(d).update(sha256="abc"),
              {("E0405", f"{NORM}.impl.steps[0].sha256")}),
    "E0407": (lambda d: norm_step(d)["args"].pop(),
              {("E0407", f"{NORM}.impl.steps[0].args")}),
    "E0408-forward": (lambda d: norm_step(d)["args"].__setitem__(3, {"arg": 0}),
                      {("E0408", f"{NORM}.impl.steps[0].args[3]")}),
    "E0408-literal": (lambda d: en_steps(d)[1]["args"].__setitem__(2, {"u32": 4}),
                      {("E0408", f"{EN}.impl.steps[1].args[2]")}),
    "E0408-scratch-dtype": (lambda d: d["kernels"]["energy"]["impl"]["scratch"]["part"].update(
        dtype="bf16"), {("E0408", f"{EN}.impl.steps[0].args[2]"),
                        ("E0408", f"{EN}.impl.steps[1].args[0]")}),
    "E0409-step": (lambda d: en_steps(d)[1]["args"].__setitem__(2, {"i32": 2**31}),
                   {("E0409", f"{EN}.impl.steps[1].args[2]")}),
    "E0409-dispatch-u8": (lambda d: (d["kernels"]["norm"]["params"].__setitem__(3, "u8"),
                                     norm_step(d)["params"].__setitem__(3, "u8"),
                                     dargs(d, 0).__setitem__(3, {"u8": 256})),
                          {("E0409", f"{D}[0].args[3]")}),
    "E0410": (lambda d: norm_step(d)["args"].__setitem__(3, {"arg": 9}),
              {("E0410", f"{NORM}.impl.steps[0].args[3]")}),
    "E0411-unknown": (lambda d: norm_step(d).update(symbol="extern:magic"),
                      {("E0411", f"{NORM}.impl.steps[0].symbol"),
                       ("E0411", f"{NORM}.impl.steps[0].cubin")}),
    "E0412": (lambda d: en_steps(d)[1]["args"].__setitem__(0, {"scratch": "parts"}),
              {("E0412", f"{EN}.impl.steps[1].args[0]")}),
    "E0413-misaligned": (lambda d: en_steps(d)[1]["args"].__setitem__(
        0, {"scratch": "part", "offset": 2}), {("E0413", f"{EN}.impl.steps[1].args[0].offset")}),
    "E0413-outside": (lambda d: en_steps(d)[1]["args"].__setitem__(
        0, {"scratch": "part", "offset": 16}), {("E0413", f"{EN}.impl.steps[1].args[0].offset")}),
    # E05xx: impl vs interface
    "E0501": (lambda d: norm_step(d)["params"].__setitem__(0, "inout buffer<bf16>"),
              {("E0501", f"{NORM}.impl.steps[0].args[0]")}),
    "E0502": (lambda d: en_steps(d)[1]["params"].__setitem__(1, "in buffer<f32>"),
              {("E0502", f"{EN}.params[2]"), ("E0503", f"{EN}.impl.steps[1].args[1]")}),
    "E0503": (lambda d: norm_step(d)["params"].__setitem__(2, "inout buffer<bf16>"),
              {("E0503", f"{NORM}.impl.steps[0].args[2]")}),
    "E0504": (lambda d: en_steps(d)[0]["params"].__setitem__(2, "in buffer<f32>"),
              {("E0504", f"{EN}.impl.steps[0].args[2]"), ("E0504", f"{EN}.impl.steps[1].args[0]")}),
    "E0505": (lambda d: d["kernels"]["energy"]["impl"]["scratch"].update(
        spare={"dtype": "u8", "shape": [8]}), {("E0505", f"{EN}.impl.scratch.spare")}),
    # E06xx: dispatches
    "E0601": (lambda d: d["programs"]["step"]["dispatches"][0].update(kernel="nrom"),
              {("E0601", f"{D}[0].kernel"), ("E0701", f"{D}[1].args[0]"),
               ("E0801", "kernels.norm")}),
    "E0602": (lambda d: dargs(d, 0).pop(), {("E0602", f"{D}[0].args")}),
    "E0603-sym-to-f32": (lambda d: (d["kernels"]["norm"]["params"].__setitem__(3, "f32"),
                                    norm_step(d)["params"].__setitem__(3, "f32")),
                         {("E0603", f"{D}[0].args[3]")}),
    "E0603-state-to-buffer": (lambda d: dargs(d, 1).__setitem__(0, {"state": "cache"}),
                              {("E0603", f"{D}[1].args[0]")}),
    "E0605-buffer": (lambda d: dargs(d, 0).__setitem__(1, {"buf": "gama"}),
                     {("E0605", f"{D}[0].args[1]"), ("E0801", "buffers.gamma")}),
    "E0605-symbol": (lambda d: dargs(d, 0).__setitem__(3, {"sym": "tokenz"}),
                     {("E0605", f"{D}[0].args[3]")}),
    "E0606": (lambda d: (d["kernels"]["norm"]["params"].__setitem__(3, "u8"),
                         norm_step(d)["params"].__setitem__(3, "u8")),
              {("E0606", f"{D}[0].args[3]")}),
    # E07xx: dataflow
    "E0702": (lambda d: d["buffers"]["h"].update({"class": "input"}),
              {("E0702", f"{D}[0].args[2]")}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_code(name, toy, pairs):
    mutate, expected = CASES[name]
    mutate(toy)
    assert pairs(toy) == expected


def test_unreadable_file(tmp_path: Path):
    with pytest.raises(DecodeError) as info:
        read(tmp_path / "missing.json")
    assert [(d.code, d.path) for d in info.value.diagnostics] == [("E0001", "(file)")]
    assert "missing.json" in str(info.value)


def test_not_utf8(tmp_path: Path):
    f = tmp_path / "bad.json"
    f.write_bytes(b'{"meta": "\xff\xfe"}')
    with pytest.raises(DecodeError) as info:
        read(f)
    assert info.value.diagnostics[0].code == "E0001"


def test_malformed_json_names_line_and_column(toy, diagnose):
    text = json.dumps(toy, indent=1).replace('"class": "weight"', '"class": "weight",', 1)
    (d,) = diagnose(text)
    assert d.code == "E0002" and "line" in d.message and "column" in d.message


def test_errors_in_several_entries_are_all_reported(toy, pairs):
    toy["buffers"]["h"]["dtype"] = "bf17"
    toy["kernels"]["norm"]["params"][0] = "buffer<bf16>"
    toy["programs"]["step"]["dispatches"][1]["args"][0] = {"buf": "h", "offest": 8}
    assert pairs(toy) == {("E0006", "buffers.h.dtype"), ("E0007", "kernels.norm.params[0]"),
                          ("E0004", f"{D}[1].args[0].offest")}


def test_every_code_is_exercised():
    exercised = {name.split("-")[0] for name in CASES}
    exercised |= {"E0001", "E0002", "E0003", "E0004", "E0007", "E0406", "E0604", "E0607",
                  "E0608", "E0701", "E0703", "E0801"}  # test_spec_mutations.py + above
    assert exercised == set(CODES)


def test_codes_do_not_leak_between_cases(toy):
    # The table mutates fresh copies; guard against accidental aliasing of the fixture.
    before = copy.deepcopy(toy)
    CASES["E0101"][0](copy.deepcopy(toy))
    assert toy == before


def test_verify_reports_bad_param_types_of_manifests_built_in_code(toy_path):
    import msgspec

    from kern_manifest import verify

    m = read(toy_path)
    norm = m.kernels["norm"]
    broken = msgspec.structs.replace(norm, params=["buffer<bf16>", *norm.params[1:]])
    m = msgspec.structs.replace(m, kernels={**m.kernels, "norm": broken})
    assert [(d.code, d.path) for d in verify(m)] == [("E0007", "kernels.norm.params[0]")]
