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
