"""The house rules of ``featurestore/`` and ``experiments/``, read from their source.

- each package is a stack of layers (:data:`LAYERS`, the sub-packages in pipeline order): a
  module imports only from its own layer or the layers below it, and ``featurestore`` never
  imports ``experiments``;
- no module over 600 formatted lines (one job per module);
- no import cycle between modules of either package. The source is read as text (``ast``), so an
  import inside a function counts like one at the top: a cycle cannot hide in a function body.
  Imports under ``if TYPE_CHECKING:`` do not run and do not count;
- modules of the packages are imported at the top, except by the command lines (``cli.py``),
  whose verbs import the model-training stack when they run so that ``--help`` starts at once;
  lazy imports of heavy third-party packages say why in a comment;
- only the store opens HDF5 files;
- every docstring example runs in ``make test``.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("featurestore", "experiments")
#: the longest a module may be (lines, as ``ruff format`` writes them: formatting made the same
#: code about 18 % longer than the hand-packed 500 lines this limit was set for)
MAX_LINES = 600
#: each package's layers, bottom first: a sub-package (or top-level module) and the rank of its
#: layer; a module may import from its own rank or lower. The packages' ``__init__`` (the public
#: door, which imports lazily or from the storage layer) and ``cli`` sit on top.
LAYERS: dict[str, dict[str, int]] = {
    "featurestore": {
        "commands": 0,
        "errors": 0,
        "files": 0,
        "features": 0,
        "processes": 0,
        "parallel": 0,
        "lazy": 0,
        "overrides": 0,
        "yaml_loader": 0,
        "concordance": 0,
        "storage": 1,
        "sources": 2,
        "extractors": 3,
        "extraction": 4,
        "demo": 5,
        "cli": 6,
    },
    "experiments": {
        "errors": 0,
        "config": 1,
        "data": 2,
        "windowing": 3,
        "models": 4,
        "evaluation": 5,
        "tracking": 6,
        "trained": 7,
        "engine": 7,
        "studies": 8,
        "cli": 9,
    },
}
#: modules that may import the packages inside functions (see the docstring)
LAZY_PACKAGE_IMPORTS = {
    "featurestore.cli",
    "experiments.cli",
    "experiments.studies.session_cli",  # the `sessions` verb of experiments.cli, in its own file
    "experiments.studies.model_cli",  # `save` and `predict`, the same way
    "experiments.studies.sweep_cli",  # what `sweep` prints, the same way
}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (packages by their __init__)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules that ``name`` (at ``path``) imports, anywhere in its body."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def resolve(mod: str) -> str | None:
        # the longest prefix that is one of our modules (``a.b.c`` imports ``a.b`` if c is a name)
        while mod and mod not in modules:
            mod = mod.rpartition(".")[0]
        return mod or None

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if (m := resolve(alias.name)) is not None:
                        found.add(m)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if mod.split(".")[0] not in PACKAGES:
                    continue
                for alias in child.names:  # ``from . import media`` imports the module ``media``
                    sub = f"{mod}.{alias.name}"
                    if (m := resolve(sub if sub in modules else mod)) is not None:
                        found.add(m)
            visit(child)

    visit(tree)
    found.discard(name)
    # a module's own package __init__ runs first whatever it imports: not an edge of its making
    return {m for m in found if not name.startswith(m + ".")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def test_no_import_cycle():
    graph = import_graph()
    cycles = _cycles(graph)
    detail = "; ".join(
        " <-> ".join(c)
        + " ("
        + ", ".join(f"{a} imports {b}" for a in c for b in sorted(graph[a] & set(c)))
        + ")"
        for c in cycles
    )
    assert not cycles, f"import cycles between modules: {detail}"


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function(tmp_path):
    # the check above could pass by finding nothing: show it sees a function-level import
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from experiments import b\n")
    b.write_text("def f():\n    from experiments import a\n    return a\n")
    modules = {"experiments.a": a, "experiments.b": b}
    graph = {n: _imported(n, p, modules) for n, p in modules.items()}
    assert graph == {"experiments.a": {"experiments.b"}, "experiments.b": {"experiments.a"}}
    assert _cycles(graph) == [["experiments.a", "experiments.b"]]


def _layer(module: str) -> tuple[str, int]:
    """``module``'s package and layer rank; a package's own ``__init__`` is above every layer."""
    top, _, rest = module.partition(".")
    if not rest:
        return top, max(LAYERS[top].values()) + 1
    first = rest.split(".")[0]
    if first not in LAYERS[top]:
        raise AssertionError(
            f"{module} is in no layer: add {first!r} to LAYERS[{top!r}] in {__file__}"
        )
    return top, LAYERS[top][first]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a higher layer (or of ``experiments`` by ``featurestore``)."""
    out = []
    for a in sorted(graph):
        pa, la = _layer(a)
        for b in sorted(graph[a]):
            pb, lb = _layer(b)
            if pa == "featurestore" and pb == "experiments":
                out.append(f"{a} imports {b} (featurestore never imports experiments)")
            elif pa == pb and lb > la:
                out.append(f"{a} (layer {la}) imports {b} (layer {lb})")
    return out


def test_layers_import_only_downwards():
    bad = upward_imports(import_graph())
    assert not bad, (
        "imports that run up a layer (move the shared code down, see LAYERS): " + "; ".join(bad)
    )


def test_the_layer_check_finds_an_upward_import():
    graph = {
        "experiments.config.grid": {"experiments.evaluation.metrics"},
        "experiments.studies.sweep": {"experiments.config.grid"},
        "featurestore.storage.store": {"experiments.config.grid", "featurestore.features"},
    }
    assert upward_imports(graph) == [
        "experiments.config.grid (layer 1) imports experiments.evaluation.metrics (layer 5)",
        "featurestore.storage.store imports experiments.config.grid (featurestore never imports experiments)",
    ]


def test_every_module_is_in_a_layer():
    for name in _modules():
        _layer(name)


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_size(name):
    n = len(_modules()[name].read_text().splitlines())
    assert n <= MAX_LINES, (
        f"{_modules()[name].relative_to(ROOT)} has {n} lines; split it by job (<= {MAX_LINES})"
    )


def _function_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements inside functions (at any depth)."""
    return [
        node
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]


def _names_a_package(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return bool(node.level) or (node.module or "").split(".")[0] in PACKAGES
    return any(a.name.split(".")[0] in PACKAGES for a in node.names)


def test_lazy_imports_are_third_party_and_say_why():
    hidden, silent = [], []
    for name, path in _modules().items():
        lines = path.read_text().splitlines()
        for node in _function_imports(ast.parse("\n".join(lines))):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if _names_a_package(node) and name not in LAZY_PACKAGE_IMPORTS:
                hidden.append(where)
            # the comment may sit on the line, the one above, or the first import of a group above
            elif not any("#" in lines[i] for i in range(max(0, node.lineno - 4), node.lineno)):
                silent.append(where)
    assert not hidden, (
        f"imports of the packages inside functions (import them at the top): {hidden}"
    )
    assert not silent, f"lazy imports without a comment saying why: {silent}"


@pytest.mark.parametrize("package", PACKAGES)
def test_only_the_store_opens_hdf5_files(package):
    allowed = {"featurestore/storage/store.py"}
    opening = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / package).rglob("*.py")
        if "h5py.File(" in p.read_text() and str(p.relative_to(ROOT)) not in allowed
    )
    assert not opening, (
        f"{opening} open HDF5 files; read shards through featurestore.storage.store.Store"
    )


def test_every_docstring_example_runs_in_make_test():
    """``make test`` runs pytest with --doctest-modules over both packages, so a module's examples
    run without a test naming them; the modules below have some."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in options["addopts"].split()
    assert set(PACKAGES) <= set(options["testpaths"])
    with_examples = {n for n, p in _modules().items() if ">>> " in p.read_text()}
    assert {
        "experiments.tracking.ui_view",
        "experiments.data.frames_cache",
        "experiments.config.loading",
        "experiments.config.grid",
        "featurestore.parallel.base",
        "experiments.config.validation",
        "featurestore.storage.store",
    } <= with_examples


#: test files named after no module, with what they test instead
TESTS_OF_NO_MODULE = {
    "tests/experiments/config/test_config.py": "the config sub-package through its door (loading, validation)",
    "tests/experiments/models/test_estimator_checks.py": "every estimator class against scikit-learn's checks",
    "tests/experiments/evaluation/test_properties.py": "property tests of metrics and windows",
    "tests/experiments/evaluation/test_tracks.py": "the tracks end to end: config.tracks, fitting, evaluate",
    "tests/experiments/tracking/test_postgres.py": "MLflow on PostgreSQL with Dask workers",
    "tests/experiments/tracking/test_ui_browser.py": "the MLflow UI's first view in a browser",
    "tests/experiments/studies/test_tutorial.py": "docs/tutorial.ipynb, run",
    "tests/featurestore/storage/test_store_links.py": "the store's hard-linked rows",
    "tests/featurestore/storage/test_raters.py": "per-rater labels: shard writers, store readers, verify",
    "tests/featurestore/extractors/test_extractor_fingerprints.py": "extractor code against versions",
    "tests/featurestore/extractors/test_lookahead.py": "each extractor's and rule's read of the future",
    "tests/featurestore/demo/test_demo_text.py": "the demo's transcripts and text channels",
}


def test_tests_mirror_the_packages():
    """``tests/<package>/<sub-package>/test_<module>.py`` tests ``<package>/<sub-package>/<module>.py``;
    the command line's tests (``test_cli*``, ``test_faults``) sit in ``tests/<package>/``."""
    modules = _modules()
    wrong = []
    for package in PACKAGES:
        for path in sorted((ROOT / "tests" / package).rglob("test_*.py")):
            rel = path.relative_to(ROOT).as_posix()
            sub = path.parent.relative_to(ROOT / "tests").as_posix().replace("/", ".")
            stem = path.stem.removeprefix("test_")
            if sub == package:
                ok = stem.startswith(("cli", "faults"))
            else:
                names = {m.rpartition(".")[2] for m in modules if m.startswith(sub + ".")}
                ok = sub in modules and (
                    any(
                        stem == n or stem.startswith(n + "_")
                        for n in names | {sub.rpartition(".")[2]}
                    )
                    or rel in TESTS_OF_NO_MODULE
                )
            if not ok:
                wrong.append(rel)
    assert not wrong, (
        "test files that do not mirror a module (tests/<package>/<sub-package>/test_<module>.py, "
        f"or listed in TESTS_OF_NO_MODULE with the reason): {wrong}"
    )


def test_helpers_are_not_imported_from_conftest():
    """Shared test code lives in ``helpers`` modules; conftest files hold fixtures only."""
    offenders = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").rglob("*.py")
        if p != Path(__file__).resolve()
        and ("conftest import" in p.read_text() or "from .test_" in p.read_text())
    )
    assert not offenders, (
        f"import helpers from a helpers module, not conftest or a test file: {offenders}"
    )
