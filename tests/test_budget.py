"""The size budget of the packages' source: no module over :data:`MODULE_LINES` lines, no
function over :data:`FUNCTION_LINES` (from its ``def`` to its last line, docstring included).

Today's offenders are listed with their size. An entry is a ceiling: the file or function
may shrink, never grow, and its entry is deleted once it is back within budget (the test
says so). A new offender fails; split it rather than add an entry.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULE_LINES = 400
FUNCTION_LINES = 80

#: Modules over budget -> their size in lines when the budget was set (may only go down).
MODULES: dict[str, int] = {
    "packages/kern-runtime/src/kern_runtime/runtime.py": 418,
}

#: ``module::qualified.name`` of functions over budget -> their size in lines (may only go down).
FUNCTIONS: dict[str, int] = {
    "packages/kern-mine/src/kern_mine/fit.py::_fit": 91,
    "packages/kern-mine/src/kern_mine/mine.py::mine": 91,
}


def _modules() -> list[Path]:
    return sorted((ROOT / "packages").glob("*/src/**/*.py"))


def function_sizes(source: str) -> dict[str, int]:
    """Qualified name (``Class.method``, ``outer.inner``) -> lines of every function."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out[name] = child.end_lineno - child.lineno + 1  # type: ignore[operator]
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def _measure() -> tuple[dict[str, int], dict[str, int]]:
    modules, functions = {}, {}
    for f in _modules():
        rel = f.relative_to(ROOT).as_posix()
        text = f.read_text()
        modules[rel] = len(text.splitlines())
        for name, n in function_sizes(text).items():
            functions[f"{rel}::{name}"] = n
    return modules, functions


def _check(sizes: dict[str, int], allowed: dict[str, int], limit: int, what: str) -> list[str]:
    problems = []
    for key, n in sorted(sizes.items()):
        if n <= limit:
            continue
        ceiling = allowed.get(key)
        if ceiling is None:
            problems.append(f"{key}: {n} lines, over the {what} budget of {limit}: split it")
        elif n > ceiling:
            problems.append(f"{key}: {n} lines, grew past its recorded {ceiling}: shrink it")
    for key, ceiling in sorted(allowed.items()):
        if sizes.get(key, 0) <= limit:
            problems.append(f"{key}: within the {what} budget now (or gone): delete its entry")
    return problems


def test_modules_within_budget():
    modules, _ = _measure()
    problems = _check(modules, MODULES, MODULE_LINES, "module")
    assert not problems, "\n".join(problems)


def test_functions_within_budget():
    _, functions = _measure()
    problems = _check(functions, FUNCTIONS, FUNCTION_LINES, "function")
    assert not problems, "\n".join(problems)


def test_the_ratchet():
    sizes = {"a": 90, "b": 100, "c": 50, "d": 85}
    allowed = {"a": 95, "b": 99, "c": 60}
    assert _check(sizes, allowed, 80, "function") == [
        "b: 100 lines, grew past its recorded 99: shrink it",
        "d: 85 lines, over the function budget of 80: split it",
        "c: within the function budget now (or gone): delete its entry",
    ]


def test_function_sizes_are_qualified():
    src = ("def f():\n    def g():\n        pass\n    return g\n\n"
           "class C:\n    async def m(self):\n        x = 1\n        return x\n")
    assert function_sizes(src) == {"f": 4, "f.g": 2, "C.m": 3}
