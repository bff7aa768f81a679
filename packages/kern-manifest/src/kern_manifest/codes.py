"""Every diagnostic code, with a one-line title and the long form ``explain`` prints.

Codes are stable: a code keeps its meaning forever; retired codes are never reused.
E00xx decode, E01xx header (version, symbols, states), E02xx buffers and scratch shapes,
E03xx expressions, E04xx impl steps, E05xx impl vs interface, E06xx dispatch binding,
E07xx program dataflow, E08xx unused declarations.
"""

from __future__ import annotations

from typing import NamedTuple


class Code(NamedTuple):
    title: str
    explanation: str


CODES: dict[str, Code] = {
    "E0001": Code("unreadable input", """\
The file could not be read, or is not UTF-8 text (the message names the offset and line of
the first byte that is not). Nothing else was checked."""),
    "E0002": Code("malformed JSON", """\
The input is not valid JSON. The message gives the line and column where the JSON parser
stopped. Nothing else was checked."""),
    "E0003": Code("duplicate key", """\
A JSON object holds the same key twice. JSON parsers usually keep the last value silently;
kern rejects the document instead, because a duplicated buffer or kernel name almost always
means two generator outputs were merged by mistake."""),
    "E0004": Code("unknown field", """\
An object has a key the format does not define. Unknown keys are an error at every level,
including inside argument objects, so that a typo such as `"offest"` cannot be dropped
silently."""),
    "E0005": Code("missing field", """\
A required key is absent (for example a buffer without `class`, a step without `grid`)."""),
    "E0006": Code("wrong type or value", """\
A value has the wrong JSON type or is outside the set the format allows: an unknown dtype
or buffer class, a negative expression constant, a `ceil_div`/`mul` divisor below 1, a
block or grid that is not three entries, or an argument/expression object that does not
have exactly one kind key (`{"buf": ...}`, `{"sym": ...}`, `{"i32": ...}`, ...)."""),
    "E0007": Code("invalid parameter type", """\
A parameter type string does not match
`^(i32|u32|i64|f32|u8|(in|out|inout) (ptr|buffer<DTYPE>))$`. Pointers and buffers must
declare a direction: write `"in buffer<bf16>"`, not `"buffer<bf16>"`."""),
    "E0008": Code("string is not Unicode text", """\
A string or key holds a lone surrogate: a `\\uD800`-`\\uDFFF` escape that is not half of
a surrogate pair (`"\\ud83d\\ude00"` is one character; `"\\udfff"` alone is none). Such a
string cannot be written as UTF-8, so no tool could print or re-encode the name."""),
    "E0009": Code("nesting too deep", """\
Arrays and objects nest at most 64 levels deep, and an expression nests at most 16
operations (`{"mul": [{"ceil_div": [{"sym": "tokens"}, 4]}, 2]}` is 3). The format needs 12
levels with the deepest expressions generators write; the limits keep every reader and
the verifier within a bounded stack. The path is where the limit is crossed."""),
    "E0010": Code("number out of range", """\
An integer literal has more than 100 digits (every integer of the format fits in 64 bits;
larger values that fit the limit are judged by the rule of their place, e.g. E0203, E0409),
or a number is not finite: `NaN` and `Infinity` are not JSON, and a literal such as `1e400`
overflows a 64-bit float. JSON cannot write infinity or NaN, so an `f32` literal is always
a finite number; `encode` refuses a manifest built in code that holds one."""),
    "E0101": Code("unsupported format version", """\
`meta.version` must be 2: this verifier implements manifest format version 2 only."""),
    "E0102": Code("inconsistent symbol bounds", """\
A symbol needs `max >= 1`, `min >= 0`, `min <= max` and `max <= 2^64-1` (symbols are
unsigned 64-bit values). All static checks run at the bounds, and the runtime refuses
values outside `[min, max]`."""),
    "E0103": Code("invalid state size", """\
A state declares its size as exactly one of `bytes_per_token` (scaled by the caller's
capacity) or `bytes_fixed` (one block, for per-sequence recurrent state); the one given must
be positive and the other absent or 0."""),
    "E0104": Code("state alignment not a power of two", """\
`align` of a state must be a positive power of two that fits in 64 bits, at most 2^63 (the
default is 256)."""),
    "E0105": Code("state size overflows 64 bits", """\
A state's `bytes_per_token` (its size at capacity 1, the least it is ever given) or
`bytes_fixed` is larger than 2^64-1 bytes. Every size of a manifest is an unsigned 64-bit
value, checked the same way as buffer sizes (E0203); the runtime checks
`bytes_per_token x capacity` against the same bound when it sizes the state."""),
    "E0201": Code("invalid shape", """\
A buffer or scratch shape must be a non-empty list whose entries are positive integers or
symbol names."""),
    "E0202": Code("unknown symbol in shape", """\
A shape dimension names a symbol that `symbols` does not declare."""),
    "E0203": Code("size overflows 64 bits", """\
The byte size of a buffer or scratch area, evaluated at the symbol maxima, does not fit in
an unsigned 64-bit integer."""),
    "E0204": Code("invalid domain", """\
A buffer's `domain` is inconsistent: `index_into` must name a buffer or state, `unit` must be
at least 1 and at most 2^64-1, `monotone` is only allowed on 1-D buffers, `min` must be below
`max` (both bounds are exclusive only for `index_into`; `min`/`max` are inclusive limits on
values), and expression bounds must evaluate."""),
    "E0301": Code("expression cannot be evaluated", """\
An expression fails at a symbol corner: it names an unknown symbol, overflows 64-bit
unsigned arithmetic, or divides by zero. Expressions are monotone, so the verifier evaluates
them with every symbol at its minimum and at its maximum."""),
    "E0401": Code("invalid block", """\
A step's block needs every dimension >= 1, x*y*z <= 1024 threads and z <= 64 (CUDA limits)."""),
    "E0402": Code("grid exceeds CUDA limits", """\
At the symbol maxima a step's grid must satisfy x <= 2^31-1 and y, z <= 65535."""),
    "E0403": Code("empty grid at symbol minima", """\
At the symbol minima no grid axis may evaluate to 0: a launch with an empty grid is an
error in CUDA."""),
    "E0404": Code("too much dynamic shared memory", """\
`shared_mem` must not exceed 232448 bytes (227 KB, the opt-in limit per block on sm_90) at
the symbol maxima."""),
    "E0405": Code("malformed sha256", """\
`sha256` must be exactly 64 hexadecimal digits."""),
    "E0406": Code("sha256 without cubin", """\
A `sha256` pin only makes sense together with the `cubin` file it pins."""),
    "E0407": Code("step argument count differs from its parameters", """\
Every step has exactly one entry in `args` per entry in its `params`."""),
    "E0408": Code("step argument does not match its parameter type", """\
Position by position, a step argument must fit its step parameter: a forwarded interface
parameter must have the same kind and element type (directions are checked separately,
E0501/E0503); a scratch area binds to a buffer of the scratch dtype or to a pointer; a
literal binds to a scalar parameter of exactly its own type."""),
    "E0409": Code("literal out of range", """\
A literal must fit its type: i32, u32, i64 and u8 by their integer ranges, f32 by the
largest finite float32."""),
    "E0410": Code("forwarded parameter does not exist", """\
`{"arg": i}` forwards interface parameter i of the kernel; i must be smaller than the number
of interface parameters."""),
    "E0411": Code("invalid extern step", """\
A step whose symbol starts with `extern:` is a runtime built-in. Known built-ins are
`extern:cublaslt_bf16_tn` and `extern:cublaslt_bf16_tn_acc`; their `params` must be exactly
the built-in's signature, and they take no `cubin` or `sha256`."""),
    "E0412": Code("unknown scratch", """\
A step argument binds a scratch area that the impl's `scratch` map does not declare."""),
    "E0413": Code("scratch offset misaligned or out of bounds", """\
A scratch binding's `offset` must be a multiple of the element size of the parameter it
binds to and lie inside the scratch area at the symbol minima."""),
    "E0501": Code("step writes through an interface `in` parameter", """\
An interface parameter declared `in` promises callers the kernel does not modify it; no step
may forward it to an `out` or `inout` step parameter."""),
    "E0502": Code("interface `out` parameter never written", """\
Every interface parameter declared `out` must be written by some step of the impl (forwarded
to an `out` or `inout` step parameter)."""),
    "E0503": Code("interface `out` parameter read before written", """\
An interface `out` parameter holds no defined data when the dispatch starts; a step may read
it (`in`/`inout`) only after an earlier step wrote it."""),
    "E0504": Code("scratch read before written", """\
Scratch is private to one dispatch and starts undefined; a step may read a scratch area only
after an earlier step of the same impl wrote it."""),
    "E0505": Code("unused scratch", """\
A declared scratch area is bound by no step: remove it."""),
    "E0601": Code("unknown kernel", """\
A dispatch names a kernel that `kernels` does not declare."""),
    "E0602": Code("wrong number of dispatch arguments", """\
A dispatch passes exactly one argument per interface parameter of its kernel."""),
    "E0603": Code("argument kind does not fit the parameter", """\
Binding rules: a buffer binds to `in|out|inout buffer<D>`; a state binds only to a `ptr`;
a symbol or expression binds to an integer scalar (never `f32`); a literal binds to a scalar
parameter of exactly its own type."""),
    "E0604": Code("buffer dtype mismatch", """\
A buffer binds only to a buffer parameter of exactly its dtype."""),
    "E0605": Code("unknown name in dispatch argument", """\
A dispatch argument names a buffer, state or symbol that is not declared."""),
    "E0606": Code("value range does not fit the scalar type", """\
A symbol or expression argument must fit the integer parameter it binds to at the symbol
maxima (and be non-negative-compatible: all expressions are non-negative)."""),
    "E0607": Code("misaligned offset", """\
A buffer argument's byte `offset` must be a multiple of the buffer's element size, so the
kernel receives an aligned element pointer."""),
    "E0608": Code("offset outside the buffer", """\
A buffer argument's byte `offset` must lie inside the buffer at the symbol minima (the
smallest the buffer is ever used at). A state argument's `offset` is checked against the
state's size at load (the size depends on the caller's capacity); statically it must fit in
64 bits."""),
    "E0701": Code("read before write", """\
Inside a program, a `workspace` or `output` buffer is read (by an `in` or `inout` parameter)
before any earlier dispatch of the same program wrote it. Workspaces and outputs start
unwritten in every program; `input`, `weight` and `carry` buffers count as written."""),
    "E0702": Code("write to an input or weight buffer", """\
`input` buffers are written by the runtime before a run and `weight` buffers are bound from
the weight file; no dispatch may write either (an `out` or `inout` parameter)."""),
    "E0703": Code("output or carry never written", """\
Every `output` and `carry` buffer must be written by some dispatch of some program."""),
    "E0801": Code("unused declaration", """\
Every declared symbol, state, buffer and kernel must be used: a symbol in a shape,
expression or argument; a state, buffer or kernel by a dispatch."""),
}


def explain(code: str) -> str:
    """The long form of ``code``; raises ``KeyError`` for an unknown code."""
    c = CODES[code.strip().upper()]
    return f"{code.strip().upper()}: {c.title}\n\n{c.explanation}\n"
