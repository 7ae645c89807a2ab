"""The house rules of ``experiments/``, read from its source: small modules, no import cycle, no
import of a sibling hidden inside a function, every docstring example run by ``make test``."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "experiments"
MODULES = sorted(PACKAGE.rglob("*.py"))
#: the longest a module may be (lines): one job per module
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.Import | ast.ImportFrom, path: Path) -> list[str]:
    """The ``experiments`` modules an import statement of ``path`` names (none for other packages)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "experiments"]
    if node.level:
        package = module_name(path).split(".")
        package = package[: len(package) - node.level + (path.name == "__init__.py")]
        base = ".".join(package + ([node.module] if node.module else []))
    elif node.module and node.module.split(".")[0] == "experiments":
        base = node.module
    else:
        return []
    known = {module_name(p) for p in MODULES}
    # ``from . import x`` / ``from .executors import local``: the names may be modules
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def function_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements inside functions (at any depth)."""
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            out += [n for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)]
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_are_small(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines; split it by job (at most {MAX_LINES})"


def test_no_sibling_is_imported_inside_a_function():
    """Lazy imports are for heavy third-party packages only (and say why in a comment)."""
    found, undocumented = [], []
    for path in MODULES:
        lines = path.read_text().splitlines()
        for node in function_imports(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if imported(node, path):
                found.append(where)
            elif not any("#" in lines[i] for i in (node.lineno - 2, node.lineno - 1)):
                undocumented.append(where)
    assert not found, f"imports of experiments modules inside functions (a hidden cycle?): {found}"
    assert not undocumented, f"lazy third-party imports without a comment saying why: {undocumented}"


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        tree = ast.parse(path.read_text())
        deps = {m for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom) for m in imported(node, path)}
        graph[module_name(path)] = {d for d in deps if d != module_name(path)}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(m: str, trail: list[str]) -> None:
        if state.get(m) == 2:
            return
        assert state.get(m) != 1, f"import cycle: {' -> '.join([*trail[trail.index(m):], m])}"
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            # importing a submodule runs its package's __init__ first: not a dependency of m's own
            if not m.startswith(d + "."):
                visit(d, [*trail, m])
        state[m] = 2

    for m in sorted(graph):
        visit(m, [])
    assert len(graph) == len(MODULES) and "experiments.executors.local" in graph["experiments.parent_run"]


def test_every_docstring_example_runs_in_make_test():
    """``make test`` runs pytest with --doctest-modules over the packages, so a module's examples
    run without a test naming it; at least the modules below have some."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in options["addopts"].split()
    assert {"experiments", "featurestore"} <= set(options["testpaths"])
    with_examples = {module_name(p) for p in MODULES if ">>> " in p.read_text()}
    assert {"experiments.ui_view", "experiments.frames_cache", "experiments.config", "experiments.grid",
            "experiments.executors.base", "experiments.config_validation"} <= with_examples
