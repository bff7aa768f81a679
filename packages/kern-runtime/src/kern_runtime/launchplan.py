"""Dispatch → launch-plan resolution (pure; no GPU).

At load, every program is compiled once into a flat list of :class:`StepTemplate`, one per
(dispatch, impl step), in launch order. Each template's argument slots are already resolved
through the dispatch wiring (``{"arg": i}`` forwarding, scratch bindings, literals) to either
a fixed value (device address or literal) or a closed expression over the symbols.

At run, :func:`bind` evaluates the remaining expressions (grid, shared memory, symbol
scalars) for one set of symbol values and packs the argument block. A runtime binds each
(program, symbol values) once and caches the result; a step's host work after that is one
driver call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

from kern_manifest import Expr, ExprNode, ParamType, VerifiedManifest, eval_expr, expr_symbols
from msgspec import UNSET

from . import errors
from .errors import CallerError, ManifestProblem
from .memory_plan import Addresses, MemoryPlan
from .staging import ArgBlock, StagingError, build_arg_block

#: A resolved slot: ``("v", value)`` fixed at load, or ``("e", expr)`` evaluated per run.
Slot = tuple[str, Union[int, float, Expr]]


@dataclass(frozen=True, slots=True)
class StepTemplate:
    """One launch of a program, resolved as far as possible without symbol values."""

    program: str
    dispatch: int          # index in the program's dispatch list
    label: str | None      # the dispatch's label (diagnostics only)
    kernel: str
    step: int              # index in the kernel's impl steps
    symbol: str            # cubin entry name, or ``extern:<op>``
    params: tuple[ParamType, ...]
    block: tuple[int, int, int]
    grid: tuple[Expr, Expr, Expr]
    shared_mem: Expr
    slots: tuple[Slot, ...]
    #: Launch with programmatic dependent launch: the manifest step says ``pdl`` and the
    #: runtime was loaded with PDL on. The kernel may then start before its predecessor on
    #: the stream finishes; it must wait on the grid dependency itself (kern-gen sets
    #: ``pdl`` only on kernels whose code does).
    pdl: bool = False

    @property
    def is_extern(self) -> bool:
        return self.symbol.startswith("extern:")

    @property
    def where(self) -> str:
        return (f"{errors.dispatch(self.program, self.dispatch, self.label)}, "
                f"{errors.kernel_step(self.kernel, self.step, self.symbol)}")

    @property
    def symbolic(self) -> bool:
        """True if any slot, grid axis or the shared memory depends on a symbol."""
        exprs = [*self.grid, self.shared_mem] + [v for t, v in self.slots if t == "e"]
        return any(next(expr_symbols(e), None) is not None for e in exprs)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class BoundKernel:
    """A kernel launch with every value known."""

    template: StepTemplate
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: ArgBlock


@dataclass(frozen=True, slots=True)
class BoundExtern:
    """A built-in extern call with every value known: row-major ``C[m,n] = A[m,k]·W[n,k]ᵀ``
    (``accumulate``: ``C += …``), addresses of a, w, c."""

    template: StepTemplate
    op: str
    a: int
    w: int
    c: int
    m: int
    n: int
    k: int

    @property
    def accumulate(self) -> bool:
        return self.op.endswith("_acc")


Bound = Union[BoundKernel, BoundExtern]


def shared_mem_max(vm: VerifiedManifest, kernel: str, step: int) -> int:
    """Dynamic shared memory bytes a step needs at the symbol maxima (what the function's
    ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` must allow)."""
    s = vm.manifest.kernels[kernel].impl.steps[step]
    return 0 if s.shared_mem is UNSET else eval_expr(s.shared_mem, vm.sym_max)  # type: ignore[arg-type]


DEFAULT_SHARED_LIMIT = 48 * 1024
"""Bytes of shared memory (static + dynamic) a block may use without the function's opt-in
``MAX_DYNAMIC_SHARED_SIZE_BYTES``."""


def needs_shared_optin(static: int, dynamic: int) -> bool:
    """Must the function's dynamic limit be raised before a launch with ``dynamic`` bytes?
    The 48 KiB default bounds static + dynamic: 16 KiB static and 40 KiB dynamic need it
    (without it the launch fails with CUDA_ERROR_INVALID_VALUE; session 28 met it)."""
    return dynamic > 0 and static + dynamic > DEFAULT_SHARED_LIMIT


def _dispatch_slots(vm: VerifiedManifest, program: str, index: int, plan: MemoryPlan,
                    addr: Addresses) -> list[Slot]:
    d = vm.manifest.programs[program].dispatches[index]
    label = None if d.label is UNSET else d.label
    out: list[Slot] = []
    for j, a in enumerate(d.args):
        kind = a.kind
        if kind == "buf":
            out.append(("v", addr.buffers[a.buf] + a.byte_offset))  # type: ignore[index]
        elif kind == "state":
            region = plan.states[a.state]  # type: ignore[index]
            if a.byte_offset >= region.nbytes:
                raise CallerError(
                    f"argument {j} uses state `{a.state}` at byte offset {a.byte_offset}, but at "
                    f"capacity {plan.capacity} the state has {region.nbytes} bytes",
                    where=errors.dispatch(program, index, label),
                    help="load with a larger capacity")
            out.append(("v", addr.states[a.state] + a.byte_offset))  # type: ignore[index]
        elif kind == "sym":
            out.append(("e", ExprNode(sym=a.sym)))
        elif kind == "expr":
            out.append(("e", a.expr))  # type: ignore[arg-type]
        else:
            out.append(("v", getattr(a, kind)))
    return out


def compile_program(vm: VerifiedManifest, program: str, plan: MemoryPlan,
                    addr: Addresses, pdl: bool = True) -> list[StepTemplate]:
    """Every launch of ``program`` in order, with addresses and literals resolved;
    ``pdl=False`` launches every step plainly, whatever the manifest says."""
    out: list[StepTemplate] = []
    for i, d in enumerate(vm.manifest.programs[program].dispatches):
        dslots = _dispatch_slots(vm, program, i, plan, addr)
        kernel = vm.manifest.kernels[d.kernel]
        for j, step in enumerate(kernel.impl.steps):
            slots: list[Slot] = []
            for sa in step.args:
                kind = sa.kind
                if kind == "arg":
                    slots.append(dslots[sa.arg])  # type: ignore[index]
                elif kind == "scratch":
                    off = 0 if sa.offset is UNSET else sa.offset
                    slots.append(("v", addr.scratch[(d.kernel, sa.scratch)] + off))  # type: ignore[index,operator]
                else:
                    slots.append(("v", getattr(sa, kind)))
            out.append(StepTemplate(
                program=program, dispatch=i, label=None if d.label is UNSET else d.label,
                kernel=d.kernel, step=j, symbol=step.symbol,
                params=tuple(vm.step_params[d.kernel][j]),
                block=tuple(step.block),  # type: ignore[arg-type]
                grid=tuple(step.grid),  # type: ignore[arg-type]
                shared_mem=0 if step.shared_mem is UNSET else step.shared_mem,  # type: ignore[arg-type]
                slots=tuple(slots), pdl=pdl and step.pdl is True))
    return out


def bind(t: StepTemplate, values: Mapping[str, int]) -> Bound:
    """Evaluate ``t`` at ``values`` (already range-checked) into a launchable step."""
    vals = [eval_expr(v, values) if tag == "e" else v for tag, v in t.slots]  # type: ignore[arg-type]
    if t.is_extern:
        a, w, c, m, n, k = vals
        for name, x in (("m", m), ("n", n), ("k", k)):
            if not 1 <= x <= 2**31 - 1:
                raise ManifestProblem(f"GEMM dimension {name} = {x} is not in [1, 2^31-1]",
                                      where=t.where)
        return BoundExtern(t, t.symbol, int(a), int(w), int(c), int(m), int(n), int(k))
    try:
        block = build_arg_block(t.params, vals)
    except StagingError as err:
        raise ManifestProblem(str(err), where=t.where) from None
    grid = tuple(eval_expr(g, values) for g in t.grid)
    smem = eval_expr(t.shared_mem, values)
    return BoundKernel(t, grid, t.block, smem, block)  # type: ignore[arg-type]


def bind_all(templates: list[StepTemplate], values: Mapping[str, int]) -> list[Bound]:
    return [bind(t, values) for t in templates]


def check_symbols(vm: VerifiedManifest, values: Mapping[str, int], program: str) -> dict[str, int]:
    """Validate a run's symbol values; return a plain dict. Every symbol needs an integer
    value in ``[min, max]``; unknown names are refused."""
    if not isinstance(values, Mapping):
        raise CallerError(f"symbol values must be a mapping name -> int, got {type(values).__name__}",
                          where=f"program `{program}`")
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise CallerError(f"symbol `{name}` must be an integer, got {v!r}",
                              where=f"program `{program}`")
    try:
        vm.check_symbols(dict(values))
    except ValueError as err:
        raise CallerError(str(err), where=f"program `{program}`") from None
    return dict(values)


def graph_key(program: str, values: Mapping[str, int]) -> tuple[str, tuple[tuple[str, int], ...]]:
    """Key of a captured graph / bound launch list: the program and its symbol values."""
    return (program, tuple(sorted(values.items())))
