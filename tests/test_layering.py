"""The package DAG and the declared dependencies, checked on the source (``ast``, nothing
imported).

- A package's ``src`` imports only the kern packages below it in :data:`LAYERS` (the edges
  are "may import"; anything reachable through them is below). Nothing imports kern-gen.
- Every import of another distribution in a package's ``src`` is declared in its
  ``pyproject.toml``: a module-level import among ``dependencies`` (importing the module
  needs it), an import inside a function among ``dependencies`` or an extra.
- Every workspace package is a member the root resolves from the workspace (dev group and
  ``[tool.uv.sources]``), so ``uv run --frozen`` on a fresh clone sees all of them.
- kern-manifest is the ground floor: its library imports only msgspec (typer is the CLI's).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "packages"

#: package -> the kern packages it may import directly; what those may import is allowed too.
LAYERS: dict[str, set[str]] = {
    "kern-manifest": set(),
    "kern-weights": {"kern-manifest"},
    "kern-mine": {"kern-manifest"},
    "kern-runtime": {"kern-weights"},
    "kern-gen": {"kern-weights", "kern-mine"},
    "kern-run": {"kern-runtime", "kern-weights"},
    # the HTTP server: its web dependencies (fastapi, uvicorn, ...) stay out of everything below
    "kern-serve": {"kern-run"},
    # the DSpark trainer (torch, transformers): writes its weights with kern-weights' writer
    "kern-train": {"kern-weights"},
}

#: (importer, imported) edges outside LAYERS that are tolerated for now, with the reason.
#: An entry that no import needs any more fails the test: delete it.
EXCEPTIONS: dict[tuple[str, str], str] = {}

#: Top-level import name -> distribution, where they differ beyond ``_`` versus ``-``.
DISTRIBUTIONS: dict[str, set[str]] = {
    "cuda": {"cuda-bindings", "cuda-pathfinder"},
    "nvmath": {"nvmath-python"},
}

#: Standard-library modules newer than the Python running the tests (imported only on the
#: versions that have them).
NEWER_STDLIB = {"compression"}  # Python 3.14: compression.zstd


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist(requirement: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert m, requirement
    return _norm(m.group(1))


def _pyproject(pkg: str) -> dict:
    return tomllib.loads((PACKAGES / pkg / "pyproject.toml").read_text())


def _declared(pkg: str) -> tuple[set[str], set[str]]:
    """(required distributions, distributions of every extra) of a package."""
    proj = _pyproject(pkg)["project"]
    required = {_dist(r) for r in proj.get("dependencies", [])}
    extras = {_dist(r) for reqs in proj.get("optional-dependencies", {}).values() for r in reqs}
    return required, extras


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(top-level module, line, inside a function) of every absolute import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((a.name.split(".")[0], child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module.split(".")[0], child.lineno, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef,
                                                            ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return out


def _sources(pkg: str) -> list[Path]:
    return sorted((PACKAGES / pkg / "src").rglob("*.py"))


def _below(pkg: str) -> set[str]:
    seen: set[str] = set()
    todo = list(LAYERS[pkg])
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(LAYERS[p])
    return seen


def _kern_imports(pkg: str) -> dict[str, list[str]]:
    """kern package imported -> 'file:line' places, for the other kern packages ``pkg`` imports."""
    own = _norm(pkg)
    out: dict[str, list[str]] = {}
    for f in _sources(pkg):
        for mod, line, _ in imports(f):
            dist = _norm(mod)
            if dist in LAYERS and dist != own:
                out.setdefault(dist, []).append(f"{f.relative_to(ROOT)}:{line}")
    return out


WORKSPACE = sorted(p.name for p in PACKAGES.iterdir() if (p / "pyproject.toml").is_file())


def test_every_package_has_a_layer():
    assert sorted(LAYERS) == WORKSPACE
    for pkg, deps in LAYERS.items():
        assert deps <= set(LAYERS), (pkg, deps)
        assert pkg not in _below(pkg), f"{pkg} is in a cycle"


def test_nothing_imports_kern_gen():
    assert all("kern-gen" not in _below(p) for p in LAYERS)


def test_nothing_imports_kern_serve():
    assert all("kern-serve" not in _below(p) for p in LAYERS)


#: The web stack kern-serve brings in: no package below it may import or declare any of it.
WEB = {"fastapi", "uvicorn", "starlette", "pydantic", "prometheus-client", "httptools", "uvloop",
       "openai", "httpx"}


@pytest.mark.parametrize("pkg", [p for p in WORKSPACE if p != "kern-serve"])
def test_web_dependencies_stay_in_kern_serve(pkg):
    required, extras = _declared(pkg)
    declared = sorted((required | extras) & WEB)
    used = sorted({f"{f.relative_to(ROOT)}:{line}: {mod}" for f in _sources(pkg)
                   for mod, line, _ in imports(f) if _norm(mod) in WEB})
    assert not declared and not used, (declared, used)


@pytest.mark.parametrize("pkg", WORKSPACE)
def test_imports_follow_the_layers(pkg):
    allowed = _below(pkg)
    bad = [f"{place}: imports {dep}"
           for dep, places in _kern_imports(pkg).items()
           if dep not in allowed and (pkg, dep) not in EXCEPTIONS for place in places]
    assert not bad, f"{pkg} may import only {sorted(allowed)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("pkg", WORKSPACE)
def test_declared_kern_dependencies_follow_the_layers(pkg):
    required, extras = _declared(pkg)
    beyond = sorted((required | extras) & set(LAYERS) - _below(pkg) - {dep for p, dep in EXCEPTIONS
                                                                       if p == pkg})
    assert not beyond, f"{pkg} declares {beyond}, which it may not import"


def test_exceptions_are_still_needed():
    for (pkg, dep), why in EXCEPTIONS.items():
        assert dep not in _below(pkg), f"({pkg}, {dep}) is allowed by LAYERS: delete it"
        assert dep in _kern_imports(pkg), f"{pkg} no longer imports {dep} ({why}): delete it"


@pytest.mark.parametrize("pkg", WORKSPACE)
def test_every_import_is_declared(pkg):
    required, extras = _declared(pkg)
    own = _norm(pkg)
    bad = []
    for f in _sources(pkg):
        for mod, line, in_function in imports(f):
            if mod in sys.stdlib_module_names or mod in NEWER_STDLIB or _norm(mod) == own:
                continue
            dists = DISTRIBUTIONS.get(mod, {_norm(mod)})
            ok = dists & (required | extras) if in_function else dists & required
            if not ok:
                where = "dependencies" if not in_function else "dependencies or an extra"
                bad.append(f"{f.relative_to(ROOT)}:{line}: `{mod}` is not in {where}")
    assert not bad, "\n".join(bad)


def test_workspace_members_resolve_from_the_workspace():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dev = {_dist(r) for r in root["dependency-groups"]["dev"]}
    sources = root["tool"]["uv"]["sources"]
    for pkg in WORKSPACE:
        assert pkg in dev, f"{pkg} is not in the root dev group"
        assert sources.get(pkg) == {"workspace": True}, f"{pkg} is not a workspace source"
        own = _pyproject(pkg).get("tool", {}).get("uv", {}).get("sources", {})
        for dep in _declared(pkg)[0] & set(LAYERS):
            assert own.get(dep) == {"workspace": True}, f"{pkg}: {dep} is not a workspace source"


def test_kern_manifest_library_imports_only_msgspec():
    outside = [f"{f.relative_to(ROOT)}:{line}: {mod}"
               for f in _sources("kern-manifest") if f.name != "cli.py"
               for mod, line, _ in imports(f)
               if mod not in sys.stdlib_module_names and mod not in ("msgspec", "kern_manifest")]
    assert not outside, "\n".join(outside)


def test_import_scan_sees_every_form(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import a.b, c\nfrom d.e import f\nfrom . import g\n"
                 "def h():\n    import i\n    class K:\n        from j import k\n"
                 "x = lambda: __import__('z')\n")
    assert imports(f) == [("a", 1, False), ("c", 1, False), ("d", 2, False), ("i", 5, True),
                          ("j", 7, True)]
