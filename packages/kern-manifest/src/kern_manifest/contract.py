"""The Qwen3/Llama caller contract (``docs/caller-contract.md``): the names a generator
(``kern-gen llama`` / ``qwen3``) and a caller (``kern-run``) agree on, and the check that a
manifest follows it, done before any GPU is touched.

The runtime knows none of these names; they are an agreement between generator and caller,
spelled once here so neither writes them as literals. Every deviation is reported at once.
Pure, like the rest of kern-manifest."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import KernError
from .schema import Manifest, UnsetType

#: The one symbol: the tokens of a call (``decode`` runs with 1).
SYMBOL = "tokens"
PREFILL = "prefill"
DECODE = "decode"
#: The programs the caller runs, in this order for a prompt.
PROGRAMS = (PREFILL, DECODE)
#: The KV cache is either per-token states (any names, ``bytes_per_token`` each: the caller
#: picks the capacity, e.g. one state per layer's K and V), or the one state ``kv`` with
#: ``bytes_fixed`` (a layout fixed at generation, ``tokens.max`` positions).
STATE = "kv"

TOKEN_IDS = "token_ids"
POSITIONS = "positions"
POS0 = "pos0"
#: Paged KV (issue 20). ``slots`` i64 [tokens]: the KV slot each row's K/V is written to (the
#: mined writers' index); ``kv_lens`` i32 [tokens]: the keys row t attends to; ``block_table``
#: i32 [tokens, P]: row t's pages, key j of row t at slot
#: ``block_table[t][j // PAGE_TOKENS] * PAGE_TOKENS + j % PAGE_TOKENS``.  Batch 1 (plain
#: kern-run): slots = positions, an identity table, kv_lens = position + 1.
SLOTS = "slots"
KV_LENS = "kv_lens"
BLOCK_TABLE = "block_table"
PAGE_TOKENS = 16
#: Many sequences in one step: ``batch`` runs ``tokens`` = B rows of B sequences (one token
#: each) and writes each row's greedy token into ``next_token`` [tokens].
BATCH = "batch"
#: Stands for any positive integer in a contract shape (the table's pages per row, P).
ANY = "<P>"
#: name -> (dtype, shape) of the buffers the caller writes before each run.
INPUTS: dict[str, tuple[str, list]] = {
    TOKEN_IDS: ("i64", [SYMBOL]),
    POSITIONS: ("i64", [SYMBOL]),
    SLOTS: ("i64", [SYMBOL]),
    POS0: ("i32", [1]),
    KV_LENS: ("i32", [SYMBOL]),
    BLOCK_TABLE: ("i32", [SYMBOL, ANY]),
}
#: The buffer the caller reads after ``decode`` / ``batch`` (each row's greedy token).
NEXT_TOKEN = "next_token"
OUTPUTS: dict[str, tuple[str, list]] = {NEXT_TOKEN: ("i64", [SYMBOL])}
#: Read only for testing (teacher-forced comparisons); its last dimension is the vocabulary.
LOGITS = "logits"
#: Speculative decoding (optional): ``verify`` over ``[anchor, drafts…]`` writes the greedy
#: token after each row into ``predictions`` (i64 [tokens]); kern-run's ``--spec`` checks it.
VERIFY = "verify"
PREDICTIONS = "predictions"
#: The most tokens one ``verify`` call takes (an anchor and at most 15 drafts).
VERIFY_MAX = 16
#: DSpark (docs/dspark.md): a draft model in the same manifest. ``decode_spec`` is decode plus
#: the taps (it writes ``carry`` row 0); ``draft`` runs ``tokens`` = B block rows and writes
#: ``draft_tokens``; ``draft_precompute`` turns ``carry`` rows 0 … tokens−1 (the last tapped
#: call's) into the draft KV of the positions/slots those rows had.
DECODE_SPEC = "decode_spec"
DRAFT = "draft"
DRAFT_PRECOMPUTE = "draft_precompute"
#: Optional: ``draft_precompute`` with GEMMs for many rows, which the caller runs after the
#: prompt's ``prefill`` chunks instead (the same inputs and effect).
DRAFT_PRECOMPUTE_PREFILL = "draft_precompute_prefill"
#: The programs a DSpark caller runs (``batch`` is the engine's, not the caller's).
DSPARK_PROGRAMS = (PREFILL, DECODE, DECODE_SPEC, VERIFY, DRAFT, DRAFT_PRECOMPUTE)
#: ``carry`` bf16 [tokens, d], class carry: the projected tap features of each row of the
#: last ``prefill`` / ``decode_spec`` / ``verify``; ``draft_tokens`` i64 [tokens], output.
CARRY = "carry"
DRAFT_TOKENS = "draft_tokens"
#: The draft's KV states: ``draft.kv.L{j}.k`` / ``.v`` for draft layers j = 0 … n−1.
DRAFT_STATE_PREFIX = "draft.kv.L"
#: The draft's weights are the manifest weights under this prefix (``draft.safetensors``).
DRAFT_WEIGHT_PREFIX = "draft."
#: In-graph acceptance (optional; docs/dspark.md step 7): the last dispatch of ``verify``
#: takes the accepted prefix j of its own rows ``[a, d_0 …]`` against its ``predictions`` and
#: writes the next round's inputs into these outputs (p' = p + j + 1, p = ``positions[0]``),
#: which the caller copies into the inputs on the device: it can queue round r + 1 before it
#: has read round r. ``next.token_ids`` i64 [B] = predictions[j], mask × (B − 1) (the mask
#: token is that dispatch's one i64 literal); ``next.positions`` i64 [B + 1] = p' + i
#: (positions and slots: one sequence); ``next.draft_kv_lens`` i32 [B] = p' + B;
#: ``next.verify_kv_lens`` i32 [B + 1] = p' + 1 + i.
NEXT_TOKEN_IDS = "next.token_ids"
NEXT_POSITIONS = "next.positions"
NEXT_DRAFT_KV_LENS = "next.draft_kv_lens"
NEXT_VERIFY_KV_LENS = "next.verify_kv_lens"
#: name -> (dtype, rows beyond B) of the acceptance outputs.
NEXT_INPUTS: dict[str, tuple[str, int]] = {
    NEXT_TOKEN_IDS: ("i64", 0), NEXT_POSITIONS: ("i64", 1),
    NEXT_DRAFT_KV_LENS: ("i32", 0), NEXT_VERIFY_KV_LENS: ("i32", 1)}


class ContractError(KernError):
    """The manifest does not follow the caller contract; ``problems`` lists every deviation
    (a command prints one ``error:`` line each and exits 2)."""

    per_problem = True

    def __init__(self, *problems: str) -> None:
        found = [p for p in problems if p] or ["manifest does not follow the caller contract"]
        super().__init__(found[0], problems=found)

    def render(self) -> str:
        return "\n".join(self.problems)


@dataclass(frozen=True)
class ContractInfo:
    """What the caller learned from a conforming manifest."""

    model: str
    max_tokens: int          # the largest prefill chunk (`tokens.max`)
    vocab: int | None        # from `logits` [1, vocab], when declared
    kv_bytes_per_token: int  # over every state; 0 when the state is fixed
    kv_bytes_fixed: int = 0  # 0 when the states are per token
    position_limit: int | None = None
    """Positions the kernels can address at all (``positions``' domain ``max`` + 1: e.g. the
    mined cache writers' compiled bound), whatever the capacity; None when not declared."""
    table_pages: int = 0
    """P, the pages of PAGE_TOKENS slots one ``block_table`` row holds (the longest sequence
    the paged attention can address is P x PAGE_TOKENS)."""

    @property
    def context(self) -> int | None:
        """The context limit of a fixed KV state (``tokens.max``, see :func:`check_manifest`),
        or None when the state is per token and the caller chooses the capacity."""
        return self.max_tokens if self.kv_bytes_fixed else None


def check_manifest(m: Manifest) -> ContractInfo:
    """Check ``m`` against the caller contract; raise :class:`ContractError` listing every
    deviation.

    The state ``kv`` is either ``bytes_per_token`` (the caller chooses the capacity) or
    ``bytes_fixed`` (a layout fixed when the manifest was generated, e.g. a captured static
    cache); then the generator guarantees that it holds at least ``tokens.max`` positions
    (``kern-gen llama``: the captured cache length, which ``tokens.max`` may not exceed and
    equals by default), and the caller takes ``tokens.max`` as the context limit
    (docs/caller-contract.md)."""
    problems: list[str] = []
    sym = m.symbols.get(SYMBOL)
    if sym is None:
        problems.append(f"manifest declares no symbol `{SYMBOL}`")
    elif sym.min != 1:
        problems.append(f"symbol `{SYMBOL}` has min {sym.min}; decode runs with {SYMBOL} = 1")
    others = sorted(set(m.symbols) - {SYMBOL})
    if others:
        problems.append(f"manifest declares symbols the caller cannot set: "
                        f"{', '.join(f'`{s}`' for s in others)} (the contract has only `{SYMBOL}`)")
    for prog in PROGRAMS:
        if prog not in m.programs:
            problems.append(f"manifest declares no program `{prog}`")
    per_token = {n: st for n, st in m.states.items() if st.bytes_per_token}
    fixed = {n: st for n, st in m.states.items() if not st.bytes_per_token}
    if not m.states:
        problems.append(f"manifest declares no state (the KV cache: per-token states, or the "
                        f"fixed state `{STATE}`)")
    elif fixed and (per_token or list(fixed) != [STATE]):
        problems.append(f"manifest mixes states: the KV cache is per-token states or the one "
                        f"fixed state `{STATE}` (fixed: "
                        f"{', '.join(f'`{n}`' for n in sorted(fixed))})")
    for name, (dtype, shape) in INPUTS.items():
        problems += _buffer_problem(m, name, "input", dtype, shape)
    for name, (dtype, shape) in OUTPUTS.items():
        problems += _buffer_problem(m, name, "output", dtype, shape)
    extra = sorted(n for n, b in m.buffers.items() if b.cls == "input" and n not in INPUTS)
    if extra:
        problems.append(f"manifest declares input buffers the caller does not write: "
                        f"{', '.join(f'`{n}`' for n in extra)} (the contract's inputs are "
                        f"{', '.join(f'`{n}`' for n in INPUTS)})")
    if problems:
        raise ContractError(*(f"manifest `{m.meta.model}`: {p}" for p in problems))
    vocab = None
    lg = m.buffers.get(LOGITS)
    if lg is not None and lg.shape and isinstance(lg.shape[-1], int):
        vocab = lg.shape[-1]
    limit = None
    dom = m.buffers[POSITIONS].domain
    if not isinstance(dom, UnsetType) and isinstance(dom.max, int):
        limit = dom.max + 1
    return ContractInfo(model=m.meta.model, max_tokens=sym.max,  # type: ignore[union-attr]
                        vocab=vocab,
                        kv_bytes_per_token=sum(st.bytes_per_token for st in per_token.values()),
                        kv_bytes_fixed=sum(st.bytes_fixed for st in fixed.values()),
                        position_limit=limit,
                        table_pages=int(m.buffers[BLOCK_TABLE].shape[1]))


def _buffer_problem(m: Manifest, name: str, cls: str, dtype: str, shape: list) -> list[str]:
    b = m.buffers.get(name)
    if b is None:
        return [f"manifest declares no {cls} buffer `{name}`"]
    want = f"{cls} {dtype}{shape}".replace(repr(ANY), ANY)
    have = f"{b.cls} {b.dtype}{list(b.shape)}"
    got = [s if not (w == ANY and isinstance(s, int)) else ANY
           for s, w in zip(b.shape, shape)] if len(b.shape) == len(shape) else list(b.shape)
    if b.cls != cls or b.dtype != dtype or got != shape:
        return [f"buffer `{name}` is {have}; the contract needs {want}"]
    return []


def check_batch(m: Manifest) -> None:
    """Check ``m`` for batched decoding (issue 20's engine): a ``batch`` program, besides
    what :func:`check_manifest` requires. Raises :class:`ContractError`."""
    if BATCH not in m.programs:
        raise ContractError(f"the engine needs a program `{BATCH}` (one token of each of "
                            f"`{SYMBOL}` sequences per step); the manifest has "
                            f"{', '.join(f'`{p}`' for p in m.programs)}")


def check_verify(m: Manifest) -> int:
    """Check ``m`` for speculation (a ``verify`` program and its ``predictions`` output,
    i64 [tokens]); return the most tokens one ``verify`` call takes
    (``min(VERIFY_MAX, tokens.max)``). Raises :class:`ContractError` listing every deviation."""
    problems = []
    if VERIFY not in m.programs:
        problems.append(f"--spec needs a program `{VERIFY}` (speculative decoding's check of "
                        f"a round's drafts); the manifest has "
                        f"{', '.join(f'`{p}`' for p in m.programs)}")
    problems += _buffer_problem(m, PREDICTIONS, "output", "i64", [SYMBOL])
    if problems:
        raise ContractError(*problems)
    sym = m.symbols.get(SYMBOL)
    return min(VERIFY_MAX, sym.max if sym is not None else VERIFY_MAX)


@dataclass(frozen=True)
class DSparkInfo:
    """What a DSpark caller learned from a conforming manifest."""

    layers: int              # draft layers (pairs of ``draft.kv.L{j}`` states)
    block: int               # B: the rows of ``draft`` and of ``draft_tokens`` [B]
    hidden: int              # d: the ``carry`` row width
    verify_max: int          # the most tokens one ``verify`` call takes
    draft_weights: tuple[str, ...]   # the ``draft.*`` weight buffers, in manifest order
    prefill_precompute: bool = False
    """The manifest has :data:`DRAFT_PRECOMPUTE_PREFILL` (for the prompt's chunks)."""
    accept_mask: int | None = None
    """The mask token of verify's in-graph acceptance (:data:`NEXT_INPUTS`); None when the
    manifest has none (the caller then writes every round's inputs itself)."""


def check_dspark(m: Manifest) -> DSparkInfo:
    """Check ``m`` for DSpark speculation (docs/dspark.md) beside :func:`check_manifest`: the
    programs of :data:`DSPARK_PROGRAMS`, ``predictions``, ``carry`` and ``draft_tokens`` (i64
    [B], B the block) with their dtypes/shapes/classes, and draft KV states ``draft.kv.L{j}.k/v`` for j = 0 … n−1
    (n ≥ 1), each per token with the bytes per token of the target's states (the same page
    pool: slot = position for one sequence). Raises :class:`ContractError` listing every
    deviation."""
    problems = [f"DSpark needs a program `{p}`" for p in DSPARK_PROGRAMS
                if p not in m.programs]
    problems += _buffer_problem(m, PREDICTIONS, "output", "i64", [SYMBOL])
    dt = m.buffers.get(DRAFT_TOKENS)
    block = 0
    if dt is None:
        problems.append(f"manifest declares no output buffer `{DRAFT_TOKENS}`")
    elif (dt.cls != "output" or dt.dtype != "i64" or len(dt.shape) != 1
          or not isinstance(dt.shape[0], int) or dt.shape[0] < 2):
        problems.append(f"buffer `{DRAFT_TOKENS}` is {dt.cls} {dt.dtype}{list(dt.shape)}; "
                        f"DSpark needs output i64[B] (B ≥ 2: the block, a fixed size)")
    else:
        block = dt.shape[0]
    carry = m.buffers.get(CARRY)
    hidden = 0
    if carry is None:
        problems.append(f"manifest declares no carry buffer `{CARRY}`")
    elif (carry.cls != "carry" or carry.dtype != "bf16" or len(carry.shape) != 2
          or carry.shape[0] != SYMBOL or not isinstance(carry.shape[1], int)):
        problems.append(f"buffer `{CARRY}` is {carry.cls} {carry.dtype}{list(carry.shape)}; "
                        f"DSpark needs carry bf16['tokens', d] (d: the hidden size)")
    else:
        hidden = carry.shape[1]
    layers, state_problems = _draft_states(m)
    problems += state_problems
    mask, accept_problems = _acceptance(m, block) if block else (None, [])
    problems += accept_problems
    if problems:
        raise ContractError(*(f"manifest `{m.meta.model}`: {p}" for p in problems))
    sym = m.symbols.get(SYMBOL)
    weights = tuple(n for n, b in m.buffers.items()
                    if b.cls == "weight" and n.startswith(DRAFT_WEIGHT_PREFIX))
    return DSparkInfo(layers=layers, block=block, hidden=hidden, draft_weights=weights,
                      verify_max=min(VERIFY_MAX, sym.max if sym is not None else VERIFY_MAX),
                      accept_mask=mask,
                      prefill_precompute=DRAFT_PRECOMPUTE_PREFILL in m.programs)


def _acceptance(m: Manifest, block: int) -> tuple[int | None, list[str]]:
    """(mask, problems) of verify's in-graph acceptance: none of :data:`NEXT_INPUTS`
    declared is a manifest without it; otherwise all four, outputs of their dtype and
    [B (+ 1)], written by one dispatch of ``verify`` that has exactly one i64 literal."""
    have = [n for n in NEXT_INPUTS if n in m.buffers]
    if not have:
        return None, []
    problems = []
    for name, (dtype, extra) in NEXT_INPUTS.items():
        b = m.buffers.get(name)
        want = f"output {dtype}[{block + extra}]"
        if b is None:
            problems.append(f"manifest declares {', '.join(f'`{n}`' for n in have)} but no "
                            f"`{name}` (in-graph acceptance needs all of "
                            f"{', '.join(f'`{n}`' for n in NEXT_INPUTS)}; {want})")
        elif b.cls != "output" or b.dtype != dtype or list(b.shape) != [block + extra]:
            problems.append(f"buffer `{name}` is {b.cls} {b.dtype}{list(b.shape)}; in-graph "
                            f"acceptance needs {want} (B = {block}, the draft's block)")
    prog = m.programs.get(VERIFY)
    if problems or prog is None:
        return None, problems
    hits = [(i, d) for i, d in enumerate(prog.dispatches)
            if any(a.kind == "buf" and a.buf == NEXT_TOKEN_IDS for a in d.args)]
    if len(hits) != 1:
        return None, [f"`{NEXT_TOKEN_IDS}` is passed to {len(hits)} dispatches of `{VERIFY}`; "
                      f"in-graph acceptance is one dispatch"]
    i, d = hits[0]
    lits = [a.i64 for a in d.args if a.kind == "i64"]
    if len(lits) != 1:
        return None, [f"programs.{VERIFY}.dispatches[{i}] (in-graph acceptance) has "
                      f"{len(lits)} i64 literals; the mask token id is its one"]
    return int(lits[0]), []


def _draft_states(m: Manifest) -> tuple[int, list[str]]:
    """(n, problems): the draft layers ``draft.kv.L{j}.k/v`` declare, each state per token
    with the target states' bytes per token."""
    draft = {n: st for n, st in m.states.items() if n.startswith(DRAFT_STATE_PREFIX)}
    target = {n: st for n, st in m.states.items() if n not in draft}
    want = {st.bytes_per_token for st in target.values()}
    problems = []
    if not draft:
        return 0, [f"manifest declares no draft KV states `{DRAFT_STATE_PREFIX}{{j}}.k` / "
                   f"`.v`"]
    if len(want) != 1 or 0 in want:
        problems.append("the target's KV states must be per-token states of one size (the "
                        "draft's share their page pool)")
    layer = {}
    for name in draft:
        head, _, kv = name[len(DRAFT_STATE_PREFIX):].partition(".")
        if head.isdigit() and kv in ("k", "v"):
            layer[name] = int(head)
        else:
            problems.append(f"draft state `{name}` is not named `{DRAFT_STATE_PREFIX}{{j}}.k` "
                            f"or `.v`")
    n = max(layer.values(), default=-1) + 1
    missing = [f"{DRAFT_STATE_PREFIX}{j}.{kv}" for j in range(n) for kv in "kv"
               if f"{DRAFT_STATE_PREFIX}{j}.{kv}" not in draft]
    if missing:
        problems.append(f"draft layers 0 … {n - 1} need both K and V states; missing "
                        f"{', '.join(f'`{x}`' for x in missing)}")
    per = next(iter(want)) if len(want) == 1 else None
    for name, st in sorted(draft.items()):
        if per and st.bytes_per_token != per:
            problems.append(f"draft state `{name}` holds {st.bytes_per_token or 0} bytes per "
                            f"token{' (a fixed state)' if st.bytes_fixed else ''}; the "
                            f"target's states hold {per}")
    return n, problems
