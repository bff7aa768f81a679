"""The manifest v2 format as frozen msgspec structs (see shared spec ``manifest-v2.md``).

Decoding into these types already rejects unknown fields at every level, wrong JSON types,
unknown dtypes and buffer classes, malformed expressions and argument objects that do not
have exactly one kind key. Everything that needs the rest of the manifest to judge (names
resolve, sizes fit, dataflow) is the verifier's job, so it can report all problems at once.

Optional keys whose absence differs from any value use ``UNSET``; encoding omits them, so
decode -> encode -> decode round-trips.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

import msgspec
from msgspec import UNSET, Meta, UnsetType
from msgspec.structs import astuple

from .dtypes import DType

NonNegInt = Annotated[int, Meta(ge=0)]
PosInt = Annotated[int, Meta(ge=1)]


class _Struct(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    pass


def _exactly_one(obj: msgspec.Struct, keys: tuple[str, ...], what: str) -> str:
    present = [k for k in keys if getattr(obj, k) is not UNSET]
    if len(present) != 1:
        found = ", ".join(f"`{k}`" for k in present) or "none"
        raise ValueError(
            f"{what} needs exactly one of {', '.join(f'`{k}`' for k in keys)}; found {found}"
        )
    return present[0]


def _kind_of(obj: msgspec.Struct, slots: tuple[tuple[int, str], ...], what: str) -> str:
    """The one kind key set on an argument object (hot: runs once per decoded argument)."""
    values = astuple(obj)
    present = [name for i, name in slots if values[i] is not UNSET]
    if len(present) != 1:
        found = ", ".join(f"`{k}`" for k in present) or "none"
        raise ValueError(
            f"{what} needs exactly one of {', '.join(f'`{k}`' for _, k in slots)}; found {found}"
        )
    return present[0]


#: Most operations an expression may nest (``{"sym"}`` is 1, ``mul(ceil_div(t, 4), 2)`` 3).
#: Generators write at most 3; the bound keeps every recursive walk of an expression (here,
#: in the verifier, the runtime) far from Python's recursion limit, and keeps a document
#: that converts within the JSON reader's nesting limit (``bounded.MAX_DEPTH``).
MAX_EXPR_DEPTH = 16


class ExprNode(_Struct, frozen=True, dict=True):
    """A non-constant expression: exactly one of ``sym``, ``ceil_div``, ``mul``."""

    sym: str | UnsetType = UNSET
    ceil_div: tuple[Union[NonNegInt, "ExprNode"], PosInt] | UnsetType = UNSET
    mul: tuple[Union[NonNegInt, "ExprNode"], PosInt] | UnsetType = UNSET

    def __post_init__(self) -> None:
        kind = _exactly_one(self, ("sym", "ceil_div", "mul"), "an expression object")
        # Inner nodes are built first (decoding is bottom-up), so one step per node bounds it.
        inner = None if kind == "sym" else getattr(self, kind)[0]
        depth = inner.depth + 1 if isinstance(inner, ExprNode) else 1
        if depth > MAX_EXPR_DEPTH:
            raise ValueError(f"an expression nests more than {MAX_EXPR_DEPTH} operations")
        self.__dict__["depth"] = depth

    depth: ClassVar[int]  # operations nested in this node, itself included; set at construction


#: An expression: a non-negative integer constant or an :class:`ExprNode`.
Expr = Union[NonNegInt, ExprNode]


class ManifestMeta(_Struct, frozen=True):
    version: int
    model: str


class Symbol(_Struct, frozen=True):
    max: int
    min: int = 1


class State(_Struct, frozen=True):
    bytes_per_token: int = 0
    bytes_fixed: int = 0
    align: int = 256


class Domain(_Struct, frozen=True):
    min: Union[int, float, ExprNode] | UnsetType = UNSET
    max: Union[int, float, ExprNode] | UnsetType = UNSET
    index_into: str | UnsetType = UNSET
    unit: int = 1
    monotone: bool = False


BufferClass = Literal["input", "output", "weight", "workspace", "carry"]
Dim = Union[int, str]


class Buffer(_Struct, frozen=True):
    dtype: DType
    shape: list[Dim]
    cls: BufferClass = msgspec.field(name="class")
    domain: Domain | UnsetType = UNSET


class Scratch(_Struct, frozen=True):
    dtype: DType
    shape: list[Dim]


class StepArg(_Struct, frozen=True, dict=True):
    """One step argument: forward (``arg``), scratch binding, or an impl-private literal."""

    arg: NonNegInt | UnsetType = UNSET
    scratch: str | UnsetType = UNSET
    offset: NonNegInt | UnsetType = UNSET
    i32: int | UnsetType = UNSET
    u32: int | UnsetType = UNSET
    i64: int | UnsetType = UNSET
    f32: float | UnsetType = UNSET
    u8: int | UnsetType = UNSET

    def __post_init__(self) -> None:
        kind = _kind_of(self, _STEP_ARG_SLOTS, "a step argument")
        if self.offset is not UNSET and kind != "scratch":
            raise ValueError("`offset` is only allowed together with `scratch`")
        # Cached outside the encoded fields: the verifier asks for it per argument.
        self.__dict__["kind"] = kind

    kind: ClassVar[str]  # "arg", "scratch" or a literal type; set at construction


STEP_ARG_KINDS = ("arg", "scratch", "i32", "u32", "i64", "f32", "u8")
_STEP_ARG_SLOTS = tuple((i, f) for i, f in enumerate(StepArg.__struct_fields__) if f != "offset")


class Step(_Struct, frozen=True, kw_only=True):
    symbol: str
    params: list[str]
    block: tuple[int, int, int]
    grid: tuple[Expr, Expr, Expr]
    shared_mem: Expr | UnsetType = UNSET
    cubin: str | UnsetType = UNSET
    sha256: str | UnsetType = UNSET
    pdl: bool | UnsetType = UNSET
    args: list[StepArg]

    @property
    def is_extern(self) -> bool:
        return self.symbol.startswith("extern:")


class Impl(_Struct, frozen=True, kw_only=True):
    scratch: dict[str, Scratch] = {}
    steps: Annotated[list[Step], Meta(min_length=1)]


class Kernel(_Struct, frozen=True):
    params: list[str]
    impl: Impl


class Arg(_Struct, frozen=True, dict=True):
    """One dispatch argument, bound to the kernel's interface parameter at its position."""

    buf: str | UnsetType = UNSET
    state: str | UnsetType = UNSET
    offset: NonNegInt | UnsetType = UNSET
    sym: str | UnsetType = UNSET
    expr: Expr | UnsetType = UNSET
    i32: int | UnsetType = UNSET
    u32: int | UnsetType = UNSET
    i64: int | UnsetType = UNSET
    f32: float | UnsetType = UNSET
    u8: int | UnsetType = UNSET

    def __post_init__(self) -> None:
        kind = _kind_of(self, _ARG_SLOTS, "a dispatch argument")
        if self.offset is not UNSET and kind not in ("buf", "state"):
            raise ValueError("`offset` is only allowed together with `buf` or `state`")
        self.__dict__["kind"] = kind

    kind: ClassVar[str]  # one of ARG_KINDS; set at construction

    @property
    def byte_offset(self) -> int:
        return 0 if self.offset is UNSET else self.offset  # type: ignore[return-value]


ARG_KINDS = ("buf", "state", "sym", "expr", "i32", "u32", "i64", "f32", "u8")
_ARG_SLOTS = tuple((i, f) for i, f in enumerate(Arg.__struct_fields__) if f != "offset")
LITERAL_KINDS = ("i32", "u32", "i64", "f32", "u8")


class Dispatch(_Struct, frozen=True, kw_only=True):
    label: str | UnsetType = UNSET
    kernel: str
    args: list[Arg]


class Program(_Struct, frozen=True):
    dispatches: list[Dispatch]


class Manifest(_Struct, frozen=True, kw_only=True):
    meta: ManifestMeta
    symbols: dict[str, Symbol] = {}
    states: dict[str, State] = {}
    buffers: dict[str, Buffer]
    kernels: dict[str, Kernel]
    programs: dict[str, Program]


#: Top-level sections that are name -> entry maps, with their entry types.
SECTIONS: dict[str, type] = {
    "symbols": Symbol,
    "states": State,
    "buffers": Buffer,
    "kernels": Kernel,
    "programs": Program,
}
