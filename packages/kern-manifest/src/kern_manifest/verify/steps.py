"""Pass 5: each impl step on its own — block, grid and shared memory limits, the cubin pin,
externs, and step arguments against step parameters (count and type, position by position)."""

from __future__ import annotations

import re

from msgspec import UNSET

from .. import paths
from ..dtypes import DTYPE_SIZES, ParamType, parse_param_type
from ..expr import ExprError
from ..schema import Kernel, Step
from ..sizes import nbytes
from .context import Context
from .literals import literal_problem

MAX_THREADS = 1024
MAX_BLOCK_Z = 64
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_SHARED_MEM = 232448

#: Built-in extern ops and the exact step params each takes.
EXTERNS: dict[str, list[str]] = {
    "extern:cublaslt_bf16_tn": [
        "in buffer<bf16>", "in buffer<bf16>", "out buffer<bf16>", "i32", "i32", "i32"],
    "extern:cublaslt_bf16_tn_acc": [
        "in buffer<bf16>", "in buffer<bf16>", "inout buffer<bf16>", "i32", "i32", "i32"],
}

_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")


def _check_geometry(cx: Context, step: Step, p: str) -> None:
    err = cx.sink.error
    bx, by, bz = step.block
    if min(step.block) < 1:
        err("E0401", f"block {list(step.block)} has a zero or negative dimension", f"{p}.block")
    elif bx * by * bz > MAX_THREADS:
        err("E0401", f"block {list(step.block)} has {bx * by * bz} threads; at most "
            f"{MAX_THREADS} are allowed", f"{p}.block")
    if bz > MAX_BLOCK_Z:
        err("E0401", f"block z is {bz}; at most {MAX_BLOCK_Z} is allowed", f"{p}.block[2]")
    for a, axis in enumerate("xyz"):
        got = cx.eval_corners(step.grid[a], f"{p}.grid[{a}]", f"grid.{axis}")
        if got is None:
            continue
        lo, hi = got
        if hi > MAX_GRID[a]:
            err("E0402", f"grid.{axis} is {hi} at the symbol maxima; the limit is {MAX_GRID[a]}",
                f"{p}.grid[{a}]")
        if lo == 0:
            err("E0403", f"grid.{axis} is 0 at the symbol minima", f"{p}.grid[{a}]")
    if step.shared_mem is not UNSET:
        got = cx.eval_corners(step.shared_mem, f"{p}.shared_mem", "shared_mem")
        if got is not None and got[1] > MAX_SHARED_MEM:
            err("E0404", f"shared_mem is {got[1]} bytes at the symbol maxima; the limit is "
                f"{MAX_SHARED_MEM}", f"{p}.shared_mem")


def _check_artifact(cx: Context, step: Step, p: str) -> None:
    err = cx.sink.error
    if step.sha256 is not UNSET:
        if not _SHA256.match(step.sha256):
            err("E0405", f"sha256 {step.sha256!r} is not 64 hexadecimal digits", f"{p}.sha256")
        if step.cubin is UNSET:
            err("E0406", "sha256 is given without a cubin to pin", f"{p}.sha256",
                help="add the `cubin` file name, or drop `sha256`")
    if step.is_extern:
        sig = EXTERNS.get(step.symbol)
        if sig is None:
            err("E0411", f"unknown built-in `{step.symbol}`", f"{p}.symbol",
                note=f"known built-ins: {', '.join(EXTERNS)}")
        elif [str(parse_param_type(t)) for t in step.params] != sig:
            err("E0411", f"`{step.symbol}` takes params {sig}", f"{p}.params")
        if step.cubin is not UNSET:
            err("E0411", f"built-in `{step.symbol}` takes no cubin", f"{p}.cubin")


def _check_args(cx: Context, kname: str, k: Kernel, step: Step, p: str) -> None:
    err = cx.sink.error
    params = [parse_param_type(t) for t in step.params]
    if len(step.args) != len(params):
        err("E0407", f"step has {len(step.args)} args for {len(params)} params", f"{p}.args")
    iface = cx.iface[kname]
    for i, (a, sp) in enumerate(zip(step.args, params)):
        ap = f"{p}.args[{i}]"
        kind = a.kind
        if kind == "arg":
            if a.arg >= len(iface):
                err("E0410", f"forwards interface parameter {a.arg}, but kernel `{kname}` has "
                    f"{len(iface)}", ap)
            elif not iface[a.arg].same_shape(sp):
                err("E0408", f"interface parameter {a.arg} is `{iface[a.arg]}` but step "
                    f"parameter {i} is `{sp}`", ap)
        elif kind == "scratch":
            _check_scratch_arg(cx, kname, k, a.scratch, a.offset, sp, i, ap)
        else:
            if sp.kind != "scalar" or sp.scalar != kind:
                err("E0408", f"{kind} literal passed to step parameter {i} of type `{sp}`", ap)
            problem = literal_problem(kind, getattr(a, kind))
            if problem:
                err("E0409", problem, ap)


def _check_scratch_arg(cx: Context, kname: str, k: Kernel, name: str, offset: object,
                       sp: ParamType, i: int, ap: str) -> None:
    err = cx.sink.error
    sc = k.impl.scratch.get(name)
    if sc is None:
        err("E0412", f"kernel `{kname}` declares no scratch `{name}`", ap)
        return
    if sp.kind == "scalar" or (sp.kind == "buffer" and sp.dtype != sc.dtype):
        err("E0408", f"scratch `{name}` holds {sc.dtype} but step parameter {i} is `{sp}`", ap)
        return
    if offset is UNSET:
        return
    elem = DTYPE_SIZES[sp.dtype or sc.dtype]
    if offset % elem:
        err("E0413", f"scratch offset {offset} is not a multiple of the {elem}-byte element",
            f"{ap}.offset")
    try:
        size = nbytes(sc, cx.lo)
    except ExprError:
        return  # shape problems are reported by the buffers pass
    if offset >= size:
        err("E0413", f"scratch offset {offset} is outside `{name}` ({size} bytes at the "
            "symbol minima)", f"{ap}.offset")


def check_steps(cx: Context) -> None:
    for kname, k in cx.m.kernels.items():
        base = paths.key("kernels", kname)
        for j, step in enumerate(k.impl.steps):
            p = f"{base}.impl.steps[{j}]"
            _check_geometry(cx, step, p)
            _check_artifact(cx, step, p)
            _check_args(cx, kname, k, step, p)
