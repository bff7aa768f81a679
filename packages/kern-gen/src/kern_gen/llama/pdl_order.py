"""The launch order an own kernel that reads state before its grid-dependency wait relies on.

A ``state_first`` step (:meth:`.assemble.Assembler.own_step`) may read, before
``griddepcontrol.wait``, inputs and state that earlier programs or launches wrote — the
cluster rope attention's ``kv_lens``, page table and old K/V rows
(kernels/attn_decode_cluster.cu).  With PDL such a step starts when its immediate
predecessor triggers; what it reads early must then be complete: the predecessor must not
touch the state (no ``state`` argument in its dispatch; inputs no kernel writes), and every
step before it must have completed.  The latter holds when the predecessor

- was launched without PDL (it started after its own predecessor completed), or
- has no PREEXIT before its wait (:attr:`.sass.PdlFacts.triggers_after_wait`): it lets
  dependents launch only after its wait returned, i.e. after its predecessor completed; that
  one did the same (a PDL step always waits), so by induction every earlier step has.

Anything else — a predecessor that touches the state or triggers before its wait, an extern
step (no code to read), or no predecessor in the program (the step would rely on the
previous program's last kernel) — is refused with the place named.  A ``state_first`` step
whose code waits first (nothing read early) needs none of this and is not checked.

Such a step gains only if its predecessor lets it launch early.  :func:`early_triggers`
names the GEMV kernels that precede one, so the assembler gives them their early twin
(gemv.cu's ``kern_gemv_et_bf16``, gemv_norm.cu's ``kern_gemv_rnorm_et_bf16``: same bits,
the trigger right after the wait instead of after the main loop); every other GEMV keeps
the late trigger (all GEMVs early slowed the DSpark round, docs/measurements.md, session
25) except the small ones of :func:`small_early_triggers`.  The early trigger is still after
the wait, so the rule above holds for it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .sass import PdlFacts

Facts = Callable[[str, str], PdlFacts]
"""(cubin file, symbol) -> the code's PDL facts."""


def _steps(program: dict[str, Any],
           kernels: dict[str, Any]) -> Iterable[tuple[str, dict, dict]]:
    """(JSON path, step, its dispatch) of every step the program launches, in launch order."""
    for i, d in enumerate(program["dispatches"]):
        for j, s in enumerate(kernels[d["kernel"]]["impl"]["steps"]):
            yield f"dispatches[{i}] (kernel `{d['kernel']}`) step {j}", s, d


def _early_readers(programs: dict[str, Any], kernels: dict[str, Any],
                   state_first: set[tuple[str, str]], facts: Facts
                   ) -> Iterable[tuple[str, str, dict, tuple[str, dict, dict] | None]]:
    """(program, JSON path, step, its predecessor or None) of every ``pdl`` step of
    ``state_first`` whose code reads before its wait; a predecessor is (path, step,
    dispatch)."""
    for name, program in programs.items():
        prev: tuple[str, dict, dict] | None = None
        for where, s, d in _steps(program, kernels):
            key = (s.get("cubin"), s["symbol"])
            if s.get("pdl") and key in state_first and not facts(*key).waits_first:
                yield name, where, s, prev
            prev = (where, s, d)


def order_problems(programs: dict[str, Any], kernels: dict[str, Any],
                   state_first: set[tuple[str, str]], facts: Facts) -> list[str]:
    """One line per ``pdl`` step of ``state_first`` (cubin, symbol) that reads before its
    wait with a predecessor that does not prove every earlier step complete."""
    problems = []
    for name, where, s, prev in _early_readers(programs, kernels, state_first, facts):
        why = _unsafe(prev, facts)
        if why:
            problems.append(f"programs.{name}.{where}: `{s['symbol']}` reads inputs "
                            f"or state before its grid-dependency wait, but {why}")
    return problems


def _unsafe(prev: tuple[str, dict, dict] | None, facts: Facts) -> str | None:
    if prev is None:
        return "it is the program's first launch (the previous program's kernels may still run)"
    where, p, d = prev
    if any("state" in a for a in d.get("args", [])):
        return f"its predecessor {where} `{p['symbol']}` touches the state it may read"
    if not p.get("pdl"):
        return None
    if "cubin" not in p:
        return f"its predecessor {where} `{p['symbol']}` is a PDL extern with no code to read"
    if not facts(p["cubin"], p["symbol"]).triggers_after_wait:
        return (f"its predecessor {where} `{p['symbol']}` lets dependents launch before its "
                f"own wait (PREEXIT before ACQBULK)")
    return None


def early_triggers(programs: dict[str, Any], kernels: dict[str, Any],
                   state_first: set[tuple[str, str]], facts: Facts,
                   twins: dict[tuple[str, str], str]) -> dict[str, str]:
    """Kernel name -> the symbol it should launch instead: every kernel whose one step is a
    (cubin, symbol) of ``twins``, launched with PDL right before a ``pdl`` step of
    ``state_first`` that reads before its wait, in any program."""
    names: dict[str, str] = {}
    for _, _, _, prev in _early_readers(programs, kernels, state_first, facts):
        if prev is None:
            continue
        _, p, pd = prev
        twin = twins.get((p.get("cubin"), p["symbol"]))
        if p.get("pdl") and len(kernels[pd["kernel"]]["impl"]["steps"]) == 1 and twin:
            names[pd["kernel"]] = twin
    return names


SMALL_EARLY_PROGRAMS = ("decode",)
SMALL_EARLY_BYTES = 16 << 20
"""A GEMV in :data:`SMALL_EARLY_PROGRAMS` whose weight is under this many bytes triggers
right after its wait (its early twin).  Such a GEMV is latency-bound (SmolLM2-135M's layer
GEMVs, 0.6-3.5 MB, run a few µs each): its successor then launches at once and streams its
first W batch while it runs.  The Qwen3-4B shape's layer GEMVs (21-100 MB) keep the late
trigger: early triggers there gained nothing (sessions 25, 27; its SiLU GEMV early 3.141 vs
3.118 ms/token, session 29 c1), where SmolLM2's SiLU GEMV alone early gave 0.545 -> 0.525."""


def small_early_triggers(programs: dict[str, Any], kernels: dict[str, Any],
                         twins: dict[tuple[str, str], str], weight_rows: dict[str, int]
                         ) -> dict[str, str]:
    """Kernel name -> its early twin for every one-step ``pdl`` GEMV of ``twins`` launched in
    :data:`SMALL_EARLY_PROGRAMS` whose weight (``weight_rows[symbol]`` x n rows of k bf16,
    n and k the dispatch's ``i32`` arguments 4 and 5) is under :data:`SMALL_EARLY_BYTES`."""
    names: dict[str, str] = {}
    for program in SMALL_EARLY_PROGRAMS:
        for d in programs.get(program, {}).get("dispatches", []):
            steps = kernels[d["kernel"]]["impl"]["steps"]
            s = steps[0]
            twin = twins.get((s.get("cubin"), s["symbol"]))
            if len(steps) != 1 or not twin or not s.get("pdl") or s["symbol"] not in weight_rows:
                continue
            n, k = (d["args"][i].get("i32") for i in (4, 5))
            if n is not None and k is not None and \
                    2 * weight_rows[s["symbol"]] * n * k < SMALL_EARLY_BYTES:
                names[d["kernel"]] = twin
    return names
