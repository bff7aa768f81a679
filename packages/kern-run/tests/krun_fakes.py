"""A fake runtime for kern-run's CPU tests: it records every call and answers ``next_token``
from a script (or from a function of the decode position)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


TABLE_PAGES = 256
"""The fake manifest's block table: pages of 16 slots per row (4096 positions)."""


def contract_manifest(max_tokens: int = 8, vocab: int = 100, extra_inputs: Sequence[str] = (),
                      model: str = "fake-llama", verify: bool = False) -> dict:
    """A tiny manifest that follows the caller contract and verifies (one made-up kernel;
    the fake runtime never launches it)."""
    params = ["in buffer<i64>", "in buffer<i64>", "in buffer<i64>", "in buffer<i32>",
              "in buffer<i32>", "in buffer<i32>", "inout ptr", "out buffer<i64>",
              "out buffer<bf16>", "i32"]
    kern = {"params": params, "impl": {"steps": [{
        "symbol": "fake_step", "params": params, "block": [1, 1, 1], "grid": [1, 1, 1],
        "args": [{"arg": i} for i in range(len(params))]}]}}
    args = [{"buf": "token_ids"}, {"buf": "positions"}, {"buf": "slots"}, {"buf": "pos0"},
            {"buf": "kv_lens"}, {"buf": "block_table"}, {"state": "kv"},
            {"buf": "next_token"}, {"buf": "logits"}, {"sym": "tokens"}]
    bufs = {"token_ids": {"dtype": "i64", "shape": ["tokens"], "class": "input"},
            "positions": {"dtype": "i64", "shape": ["tokens"], "class": "input"},
            "slots": {"dtype": "i64", "shape": ["tokens"], "class": "input"},
            "pos0": {"dtype": "i32", "shape": [1], "class": "input"},
            "kv_lens": {"dtype": "i32", "shape": ["tokens"], "class": "input"},
            "block_table": {"dtype": "i32", "shape": ["tokens", TABLE_PAGES],
                            "class": "input"},
            "next_token": {"dtype": "i64", "shape": ["tokens"], "class": "output"},
            "logits": {"dtype": "bf16", "shape": [1, vocab], "class": "output"}}
    kernels = {"step": kern}
    disp = [{"kernel": "step", "args": args}]
    for n in extra_inputs:
        bufs[n] = {"dtype": "i32", "shape": [1], "class": "input"}
        kernels[f"use_{n}"] = {"params": ["in buffer<i32>"], "impl": {"steps": [{
            "symbol": f"use_{n}", "params": ["in buffer<i32>"], "block": [1, 1, 1],
            "grid": [1, 1, 1], "args": [{"arg": 0}]}]}}
        disp.append({"kernel": f"use_{n}", "args": [{"buf": n}]})
    programs = {"prefill": {"dispatches": disp}, "decode": {"dispatches": disp}}
    if verify:          # speculation's check: predictions i64 [tokens] (spec/contract.py)
        bufs["predictions"] = {"dtype": "i64", "shape": ["tokens"], "class": "output"}
        vp = ["in buffer<i64>", "inout ptr", "out buffer<i64>"]
        kernels["verify_step"] = {"params": vp, "impl": {"steps": [{
            "symbol": "fake_verify", "params": vp, "block": [1, 1, 1], "grid": [1, 1, 1],
            "args": [{"arg": i} for i in range(3)]}]}}
        programs["verify"] = {"dispatches": [{"kernel": "verify_step", "args": [
            {"buf": "token_ids"}, {"state": "kv"}, {"buf": "predictions"}]}]}
    return {"meta": {"version": 2, "model": model}, "symbols": {"tokens": {"max": max_tokens}},
            "states": {"kv": {"bytes_per_token": 64}}, "buffers": bufs, "kernels": kernels,
            "programs": programs}


class FakePending:
    def __init__(self, rt: "FakeRuntime", name: str, value: int) -> None:
        self.rt, self.name, self.value = rt, name, value

    def wait(self) -> np.ndarray:
        self.rt.events.append(("wait", self.name, self.value))
        return np.array([self.value], dtype=np.int64)


class FakeRuntime:
    """Records ("write", name, array copy), ("write_scalars", values), ("copy", dst, src), ("run", program, symbols,
    graph), ("read", name), ("read_async", name), ("wait", name, value), ("capture", program,
    symbols), ("sync",). ``next_token`` is ``script[i]`` at the i-th decode (-1 past the
    script: a speculative step whose token nobody may use), or ``fn(position)``; each decode
    records the ``token_ids`` it was given in ``fed``."""

    def __init__(self, script: Sequence[int] | None = None,
                 fn: Callable[[int], int] | None = None) -> None:
        self.script = list(script or [])
        self.fn = fn
        self.events: list[tuple] = []
        self.decodes = 0
        self.inputs: dict[str, np.ndarray] = {}
        self.fed: list[int] = []
        self.closed = False

    def write(self, name: str, array: np.ndarray) -> None:
        self.inputs[name] = array.copy()
        self.events.append(("write", name, array.copy()))

    def write_scalars(self, values: dict[str, int]) -> None:
        for name, v in values.items():
            self.inputs[name] = np.array([v], np.int32 if name == "kv_lens" else np.int64)
        self.events.append(("write_scalars", dict(values)))

    def run(self, program: str, symbols: dict[str, int], *, graph: bool = True) -> None:
        self.events.append(("run", program, dict(symbols), graph))
        if program == "decode":
            pos = int(self.inputs["positions"][0])
            self.fed.append(int(self.inputs["token_ids"][0]))
            i = self.decodes
            self._next = self.fn(pos) if self.fn else (self.script[i] if i < len(self.script)
                                                       else -1)
            self.decodes += 1

    def copy(self, dst: str, src: str, symbols=None) -> None:
        assert (dst, src, symbols) == ("token_ids", "next_token", {"tokens": 1})
        self.events.append(("copy", dst, src))
        self.inputs[dst] = np.array([self._next], dtype=np.int64)

    def read_async(self, name: str, symbols=None) -> "FakePending":
        self.events.append(("read_async", name))
        assert name == "next_token"
        return FakePending(self, name, self._next)

    def read(self, name: str, symbols=None) -> np.ndarray:
        self.events.append(("read", name))
        assert name == "next_token"
        return np.array([self._next], dtype=np.int64)

    def synchronize(self) -> None:
        self.events.append(("sync",))

    def capture(self, program: str, symbols: dict[str, int]) -> None:
        self.events.append(("capture", program, dict(symbols)))

    def summary(self) -> str:
        return "fake runtime"

    def close(self) -> None:
        self.closed = True

    def runs(self) -> list[tuple]:
        return [e for e in self.events if e[0] == "run"]
