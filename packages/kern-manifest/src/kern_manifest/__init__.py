"""kern-manifest: the kern manifest v2 format — schema, decoder, collecting verifier and
rustc-style diagnostics. Plain data (frozen msgspec structs) plus pure functions.

Typical use::

    from kern_manifest import load, ManifestError
    try:
        vm = load("manifest.json")        # read -> decode -> verify
    except ManifestError as err:
        print(render_human(err.diagnostics, err.source))
"""

from .bounded import MAX_DEPTH, MAX_INT_DIGITS
from .codes import CODES, explain
from .decode import decode, encode, from_obj, read
from .diagnostics import (DecodeError, Diagnostic, EncodeError, ManifestError,
                          VerificationError)
from .dtypes import (DTYPE_SIZES, INT_RANGES, SCALAR_SIZES, ParamType, ParamTypeError,
                     abi_layout, abi_size, parse_param_type)
from .errors import KernError, fail
from .expr import ExprError, corners, eval_expr, expr_symbols, format_expr
from .jsonschema import json_schema
from .render import render_human, render_json
from .schema import (MAX_EXPR_DEPTH, Arg, Buffer, Dispatch, Domain, Expr, ExprNode, Impl, Kernel,
                     Manifest, ManifestMeta, Program, Scratch, State, Step, StepArg, Symbol)
from .sizes import fits_u64, nbytes, shape_at, state_bytes
from .verified import VerifiedManifest, check, load
from .verify import EXTERNS, verify

__version__ = "0.1.0"

__all__ = [
    "CODES", "DTYPE_SIZES", "EXTERNS", "INT_RANGES", "MAX_DEPTH", "MAX_EXPR_DEPTH",
    "MAX_INT_DIGITS", "SCALAR_SIZES", "Arg", "Buffer", "DecodeError", "Diagnostic", "Dispatch",
    "Domain", "EncodeError", "Expr", "ExprError", "ExprNode", "Impl", "KernError", "Kernel",
    "Manifest", "ManifestError", "ManifestMeta", "ParamType", "ParamTypeError", "Program",
    "Scratch", "State", "Step", "StepArg", "Symbol", "VerificationError", "VerifiedManifest",
    "abi_layout", "abi_size", "check", "corners", "decode", "encode", "eval_expr", "explain",
    "expr_symbols", "fail", "fits_u64", "format_expr", "from_obj", "json_schema", "load",
    "nbytes", "parse_param_type", "read", "render_human", "render_json", "shape_at",
    "state_bytes", "verify",
]
