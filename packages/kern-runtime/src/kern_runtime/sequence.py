"""Several program runs and device copies queued as one unit: :meth:`Runtime.run_sequence`.

A caller whose steps follow one another with no host decision in between (a DSpark round fed
by its previous round's in-graph acceptance: copies, ``draft``, copies, ``verify``,
``draft_precompute``) can hand the runtime the whole list. With ``graph=True`` the list is
captured once into ONE CUDA graph (kernel, GEMM and memcpy nodes in list order) and replayed
with one ``cuGraphLaunch``: one launch instead of one per program and copy, and no graph
boundary between programs (a ``pdl`` step right behind another program's kernel keeps its
programmatic edge). ``graph=False`` queues the same steps one by one; both compute the same
bits as the individual :meth:`~Runtime.run` / :meth:`~Runtime.copy` calls.

Contracts:
- Ops are plain frozen values (hashable): the graph is keyed by the list of ops with their
  checked symbol values.
- Every op is checked (program, symbols, buffers, dtypes, room) before anything is queued or
  captured; a refused list leaves the runtime as it was. So is, on every run, each copy's
  source that no earlier op of the list writes: some run must have written it
  (:mod:`.written`).
- The cuBLASLt algorithms of every program are chosen before the capture begins.
- A copy is a memcpy (a memcpy node in the graph). ``copy_kernel=True``: each run of
  consecutive copies whose destinations overlap no other copy of the run is ONE launch of
  the runtime's own copy kernel instead (``cuda/copies.cu``). Measured (H100, session 19,
  docs/measurements.md): a memcpy node and a copy-kernel node cost the same, ~0.95 µs each
  between small kernels, so a group of n copies saves ~(n − 1) × 0.95 µs; a DSpark round
  (groups of 4 and 2) showed no difference beyond its noise, so it is not the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import CallerError
from .hostdata import row_offset
from .launchplan import check_symbols, graph_key
from .mailbox import Mailbox
from .summary import GraphInfo


def _frozen(symbols: Mapping[str, int] | None) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((symbols or {}).items()))


@dataclass(frozen=True)
class Run:
    """Run ``program`` at ``symbols`` (as :meth:`Runtime.run`)."""

    program: str
    symbols: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, program: str, symbols: Mapping[str, int] | None = None) -> "Run":
        return cls(program, _frozen(symbols))


@dataclass(frozen=True)
class Copy:
    """Copy buffer ``src`` (its shape at ``symbols``) into input or carry ``dst`` from row
    ``dst_row`` (as :meth:`Runtime.copy`)."""

    dst: str
    src: str
    symbols: tuple[tuple[str, int], ...] | None = None
    dst_row: int = 0

    @classmethod
    def of(cls, dst: str, src: str, symbols: Mapping[str, int] | None = None,
           dst_row: int = 0) -> "Copy":
        return cls(dst, src, None if symbols is None else _frozen(symbols), dst_row)


@dataclass(frozen=True)
class Load:
    """Copy bytes from byte ``offset`` of mailbox ``box`` (:mod:`.mailbox`) into input or
    carry ``dst`` from row ``dst_row``: as many as ``dst`` holds at ``symbols``. Runs in the
    copy kernel (``copy_kernel=True``)."""

    dst: str
    box: Any
    offset: int = 0
    symbols: tuple[tuple[str, int], ...] | None = None
    dst_row: int = 0

    @classmethod
    def of(cls, dst: str, box: Any, offset: int = 0,
           symbols: Mapping[str, int] | None = None, dst_row: int = 0) -> "Load":
        return cls(dst, box, offset, None if symbols is None else _frozen(symbols), dst_row)


@dataclass(frozen=True)
class Store:
    """Copy buffer ``src`` (its shape at ``symbols``) into mailbox ``box`` from byte
    ``offset``. Runs in the copy kernel (``copy_kernel=True``)."""

    box: Any
    src: str
    offset: int = 0
    symbols: tuple[tuple[str, int], ...] | None = None

    @classmethod
    def of(cls, box: Any, src: str, offset: int = 0,
           symbols: Mapping[str, int] | None = None) -> "Store":
        return cls(box, src, offset, None if symbols is None else _frozen(symbols))


Op = Run | Copy | Load | Store


#: Copies one launch of the copy kernel takes (``cuda/copies.cu``).
MAX_GROUP = 8


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def copy_groups(plans: list) -> list:
    """``plans`` with each run of consecutive non-empty copies split into groups that one
    launch may take: at most :data:`MAX_GROUP`, and no copy's destination overlapping
    another's source or destination in the group (order inside a launch is unspecified).
    A group is ``("copies", [plan, ...])``; runs are kept as they are."""
    out: list = []
    for p in plans:
        if p[0] != "copy" or not p[1][2]:
            out.append(p)
            continue
        dst, src, n, _ = p[1]
        last = out[-1] if out and out[-1][0] == "copies" else None
        if last is not None and len(last[1]) < MAX_GROUP and not any(
                _overlap((dst, n), (d, m)) or _overlap((dst, n), (s_, m))
                or _overlap((d, m), (src, n)) for d, s_, m, _ in last[1]):
            last[1].append(p[1])
        else:
            out.append(("copies", [p[1]]))
    return out


class _CopyStep:
    """A planned device copy as a step (run: queued on the stream, or recorded as a memcpy
    node while the stream captures)."""

    def __init__(self, dev: Any, stream: Any, plan: tuple[int, int, int, str]) -> None:
        self.dev, self.stream, self.plan = dev, stream, plan

    def run(self) -> None:
        dst, src, n, where = self.plan
        if n:
            self.dev.d2d(dst, src, n, self.stream, where=where)


class SequenceRuns:
    """:class:`~kern_runtime.Runtime`'s sequence methods (module docstring); they use the
    runtime's program checks, prepared steps, copy plans and graph cache."""

    def _sequence_plan(self, ops: Sequence[Op], copy_kernel: bool
                       ) -> tuple[tuple, list, dict[str, int] | None]:
        """(graph key, the checked ops, the last run's symbol values); raises on the first
        refused op before anything is queued."""
        if not ops:
            raise CallerError("run_sequence: the sequence is empty")
        keyed, plans, last = [], [], None
        for op in ops:
            if isinstance(op, Run):
                self._program(op.program)
                values = check_symbols(self.vm, dict(op.symbols), op.program)
                keyed.append(("run",) + graph_key(op.program, values))
                plans.append(("run", op.program, values))
                last = values
            elif isinstance(op, Copy):
                sym = None if op.symbols is None else dict(op.symbols)
                plan = self._copy_plan(op.dst, op.src, sym, op.dst_row)
                keyed.append(("copy", op.dst, op.src, plan[2], op.dst_row))
                plans.append(("copy", plan))
            else:
                if not copy_kernel:
                    raise CallerError(f"run_sequence: {type(op).__name__} ops run in the "
                                      f"runtime's copy kernel", help="pass copy_kernel=True")
                plan = self._mailbox_plan(op)
                keyed.append((type(op).__name__,) + plan[:3])   # the addresses say it all
                plans.append(("copy", plan))
        return ("sequence", copy_kernel, tuple(keyed)), plans, last

    def copy(self, dst: str, src: str, symbols: Mapping[str, int] | None = None, *,
             dst_row: int = 0) -> None:
        """Queue a device copy of buffer ``src`` (shape at ``symbols`` as for :meth:`read`)
        into input or carry buffer ``dst`` (same dtype) from row ``dst_row`` (see
        :func:`.hostdata.row_offset`), ordered like :meth:`write`."""
        self._written.check((src,), f"copy `{src}` into `{dst}`")
        d, s, n, where = self._copy_plan(dst, src, symbols, dst_row)
        if n:
            self._dev.d2d(d, s, n, self._stream, where=where)

    def _copy_plan(self, dst: str, src: str, symbols: Mapping[str, int] | None,
                   dst_row: int) -> tuple[int, int, int, str]:
        """(destination address, source address, bytes, where) of a checked copy."""
        s, d = self._buffer(src), self._writable(dst, f"copy into `{dst}`: it")
        where = f"copy `{src}` into `{dst}`"
        if s.dtype != d.dtype:
            raise CallerError(f"copy `{src}` ({s.dtype}) into `{dst}` ({d.dtype}): the dtypes "
                              f"differ")
        *_, n = self._extent(src, symbols, f"copy `{src}`")
        return self._into(dst, d, dst_row, n, where), self.addresses.buffers[src], n, where

    def _into(self, name: str, buf: Any, row: int, n: int, where: str) -> int:
        """The address of row ``row`` of input ``name`` (its manifest buffer ``buf``) after
        checking that ``n`` bytes from there fit the buffer."""
        off = row_offset(where, buf, row, self.vm.sym_max)
        if off + n > (room := self.plan.buffers[name].nbytes):
            raise CallerError(f"{where}: {n} bytes at byte {off} do not fit its {room}")
        return self.addresses.buffers[name] + off

    def mailbox(self, nbytes: int) -> Mailbox:
        """A new :class:`~kern_runtime.mailbox.Mailbox` of ``nbytes`` (freed at close): host
        memory that sequences' :class:`~kern_runtime.sequence.Load` and
        :class:`~kern_runtime.sequence.Store` ops read and write on the GPU."""
        self._check_open()
        box = Mailbox(self._dev, self._stream, nbytes)
        self._mailboxes.append(box)
        return box

    def _mailbox_plan(self, op: "Load | Store") -> tuple[int, int, int, str]:
        """(destination, source, bytes, where) of a checked :class:`Load` or :class:`Store`."""
        box = op.box
        if not any(b is box for b in self._mailboxes):
            raise CallerError(f"{type(op).__name__}: the mailbox is not one of this runtime's "
                              f"(Runtime.mailbox makes them)")
        sym = None if op.symbols is None else dict(op.symbols)
        if isinstance(op, Load):
            d = self._writable(op.dst, f"load into `{op.dst}`: it")
            where = f"load mailbox bytes {op.offset}… into `{op.dst}`"
            *_, n = self._extent(op.dst, sym, where)
            dst, src = self._into(op.dst, d, op.dst_row, n, where), box.addr + op.offset
        else:
            self._buffer(op.src)
            where = f"store `{op.src}` into mailbox bytes {op.offset}…"
            *_, n = self._extent(op.src, sym, where)
            dst, src = box.addr + op.offset, self.addresses.buffers[op.src]
        if op.offset < 0 or op.offset + n > box.nbytes:
            raise CallerError(f"{where}: {n} bytes at byte {op.offset} are outside the "
                              f"mailbox's {box.nbytes}")
        return dst, src, n, where

    def _sequence_steps(self, plans: list, copy_kernel: bool) -> list:
        """The steps of checked ops, in order (GEMM algorithms chosen here, never while a
        stream captures); with ``copy_kernel`` a launch per group of copies."""
        steps: list = []
        for p in (copy_groups(plans) if copy_kernel else plans):
            if p[0] == "run":
                steps += self._steps(p[1], p[2])
            elif p[0] == "copies":
                segs = [(d, s, n) for d, s, n, _ in p[1]]
                where = "; ".join(w for *_, w in p[1])
                steps.append(self._dev.copies(segs, self._stream, where))
            else:
                steps.append(_CopyStep(self._dev, self._stream, p[1]))
        return steps

    def capture_sequence(self, ops: Sequence[Op], *, copy_kernel: bool = False) -> Any:
        """Capture (once) and return the one graph of ``ops`` without running it."""
        key, plans, _ = self._sequence_plan(ops, copy_kernel)
        g = self._graphs.get(key)
        if g is None:
            steps = self._sequence_steps(plans, copy_kernel)
            names = "+".join(op.program if isinstance(op, Run) else type(op).__name__.lower()
                             for op in ops)
            g = self._dev.capture(self._stream, steps, f"sequence {names}")
            self._graphs[key] = g
            self._graph_info.append(GraphInfo(f"[{names}]", {}, g.nodes, g.capture_s * 1000))
        return g

    def run_sequence(self, ops: Sequence[Op], *, graph: bool = True,
                     copy_kernel: bool = False) -> None:
        """Queue ``ops`` in order: with ``graph`` as one CUDA graph (captured on first use),
        else step by step; ``copy_kernel``: module docstring. Does not wait for the GPU."""
        if graph:
            g, last, reads, programs = self._sequence_graph(tuple(ops), copy_kernel)
            self._written.check(reads, "run_sequence")
            g.launch(self._stream, where="sequence")
        else:
            _, plans, last = self._sequence_plan(ops, copy_kernel)
            reads, programs = self._sequence_effects(ops)
            self._written.check(reads, "run_sequence")
            for s in self._sequence_steps(plans, copy_kernel):
                s.run()
        if last is not None:
            self._last_values = last
        for program in programs:
            self._written.ran(program)

    def _sequence_effects(self, ops: Sequence[Op]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(the buffers its copies read that no earlier op of ``ops`` writes, the programs
        it runs in order)."""
        reads: list[str] = []
        programs: list[str] = []
        written: set[str] = set()
        for op in ops:
            if isinstance(op, Run):
                programs.append(op.program)
                written |= self._written.by_program[op.program]
            elif isinstance(op, (Copy, Store)) and op.src not in written:
                reads.append(op.src)
        return tuple(reads), tuple(programs)

    def _sequence_graph(self, ops: tuple, copy_kernel: bool) -> tuple:
        """(graph, last run's symbol values, :meth:`_sequence_effects`) of ``ops``; the ops
        are checked once, on their first use: a replay is a dict lookup and one launch (a fed
        DSpark round per round)."""
        self._check_open()
        kept = self.__dict__.setdefault("_sequence_graphs", {})
        hit = kept.get((ops, copy_kernel))
        if hit is None:
            key, _, last = self._sequence_plan(ops, copy_kernel)
            g = self._graphs.get(key) or self.capture_sequence(ops, copy_kernel=copy_kernel)
            hit = kept[(ops, copy_kernel)] = (g, last, *self._sequence_effects(ops))
        return hit
