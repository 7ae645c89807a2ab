"""The package's shape: small modules, no import cycle, no import hidden in a function, one door to the shards."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "featurestore"
MAX_LINES = 500


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the featurestore package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def relative_imports(name: str, path: Path, tree: ast.AST) -> set[str]:
    """Modules of the package that ``name`` imports at its top level."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found |= {m for m in [target, *(f"{target}.{a.name}" for a in node.names)] if m in modules()}
    return found - {name}


def function_imports(tree: ast.AST) -> list[ast.stmt]:
    """Import statements inside functions (lazy imports)."""
    return [node for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(fn) if isinstance(node, ast.Import | ast.ImportFrom)]  # fmt: skip


def test_no_module_is_over_500_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}; split them by job"


def test_no_import_cycle_between_modules():
    mods = modules()
    graph = {n: relative_imports(n, p, ast.parse(p.read_text())) for n, p in mods.items()}
    # a package importing its own submodules (to re-export them) is not a cycle
    graph = {n: {m for m in deps if not m.startswith(n + ".")} for n, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail[trail.index(m):], m]))
            if m not in state:
                visit(m, [*trail, m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert graph["featurestore.store"] >= {"featurestore.shard"} and "featurestore.store" not in graph["featurestore.features"]


def test_no_package_import_hidden_in_a_function_and_lazy_imports_say_why():
    hidden, silent = [], []
    for path in modules().values():
        source = path.read_text()
        lines = source.splitlines()
        for node in function_imports(ast.parse(source)):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("featurestore")):
                hidden.append(where)
            elif "#" not in lines[node.lineno - 1]:
                silent.append(where)
    assert not hidden, f"imports of the package inside functions (import at the top): {hidden}"
    assert not silent, f"lazy imports of third-party packages without a comment saying why: {silent}"


@pytest.mark.parametrize("package", ["featurestore", "experiments"])
def test_only_the_store_opens_hdf5_files(package):
    allowed = {"featurestore/store.py"}
    opening = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py")
        if "h5py.File(" in p.read_text() and str(p.relative_to(ROOT)) not in allowed
    )  # fmt: skip
    assert not opening, f"{opening} open HDF5 files; read shards through featurestore.store.Store"
