"""Fingerprints of the extractors' code, pinned to their version constants.

A shard's cache key covers the extractor's name, ``version`` and parameters, not its code: a
change to what an extractor computes that does not bump ``version`` leaves stale channels in
every store, and ``featurestore extract`` reports them as current. This module records, for
every extractor (and the per-role voice rules of :mod:`featurestore.extraction.derived`), a hash of the
code it computes with, next to its version, in ``extractor_fingerprints.json``;
``test_extractor_fingerprints.py`` fails when the code changed and the version did not.

The code of an extractor is its module plus the ``featurestore`` modules that module imports
(relative imports, also inside functions, followed transitively), except the storage and
interface modules (:data:`NOT_CODE`). A module's hash is the SHA-256 of its syntax tree
without docstrings, so comments, docstrings and formatting do not count.

Update the record after bumping a version (or after a change that cannot alter any output)::

    python -m tests.featurestore.extractors.extractor_fingerprints                     # after a version bump
    python -m tests.featurestore.extractors.extractor_fingerprints --same-output face_geom   # a refactor

Without ``--same-output``, an extractor whose code changed while its version did not is
refused: bump its ``version`` (cached channels are then recomputed) or name it there.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = "featurestore"
RECORD = Path(__file__).with_name("extractor_fingerprints.json")
UPDATE_COMMAND = "python -m tests.featurestore.extractors.extractor_fingerprints"
#: modules that hold data or the interface, not what an extractor computes
NOT_CODE = frozenset(
    {
        "featurestore.storage.store",
        "featurestore.storage.shard",
        "featurestore.features",
        "featurestore.extractors.base",
        "featurestore.extractors",
    }
)


def source_fingerprint(source: str) -> str:
    """SHA-256 (hex) of a module's syntax tree without docstrings: comments, docstrings and
    formatting do not change it; any change to code or constants does."""
    tree = ast.parse(source)
    return hashlib.sha256(_canonical(tree).encode()).hexdigest()


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _canonical(node) -> str:
    """A text form of an AST that is the same across Python versions: fields that are None or
    empty (new optional fields such as ``type_params``) are left out."""
    if isinstance(node, ast.AST):
        parts = []
        for name in node._fields:
            value = getattr(node, name, None)
            if (
                name == "body"
                and isinstance(value, list)
                and value
                and _is_docstring(value[0])
                and isinstance(
                    node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
                )
            ):
                value = value[1:] or [ast.Pass()]
            if value is None or value == []:
                continue
            parts.append(f"{name}={_canonical(value)}")
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(_canonical(v) for v in node) + "]"
    return repr(node)


def _module_path(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _imported(module: str) -> set[str]:
    """``featurestore`` modules imported (relatively, anywhere in the file) by ``module``."""
    path = _module_path(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            # `from . import x` may name a module
            names = [f"{target}.{a.name}" for a in node.names]
            found |= {m for m in [target, *names] if _module_path(m).exists()}
    return found


def code_modules(*modules: str) -> list[str]:
    """``modules`` and the ``featurestore`` modules they compute with, sorted (see the module docstring)."""
    seen, todo = set(), list(modules)
    while todo:
        m = todo.pop()
        if m in seen or m in NOT_CODE:
            continue
        seen.add(m)
        todo.extend(_imported(m))
    return sorted(seen)


def versioned_code() -> dict[str, tuple[str, tuple[str, ...], str]]:
    """Name -> (version, modules, where the version constant is) of every versioned computation
    whose output lands in a shard: the registered extractors and the per-role voice rules of
    :mod:`featurestore.extraction.derived`."""
    from featurestore.extraction import derived
    from featurestore.extractors import registry

    out = {
        name: (
            str(cls.version),
            (cls.__module__,),
            f"`version` of {cls.__name__} in {_module_path(cls.__module__).relative_to(ROOT).as_posix()}",
        )
        for name, cls in registry().items()
    }
    where = "featurestore/extraction/derived.py"
    out[derived.SPEAKING_RULE] = (
        derived.SPEAKING_VERSION,
        ("featurestore.sources.speaking",),
        f"SPEAKING_VERSION in {where}",
    )
    out[derived.TRANSCRIPT_SPEAKING_RULE] = (
        derived.TRANSCRIPT_SPEAKING_VERSION,
        ("featurestore.sources.speaking", "featurestore.sources.transcripts"),
        f"TRANSCRIPT_SPEAKING_VERSION in {where}",
    )
    return out


def current() -> dict[str, dict]:
    """The record as the code stands: name -> {version, modules: {path: fingerprint}}."""
    out = {}
    for name, (version, modules, constant) in sorted(versioned_code().items()):
        modules = {
            _module_path(m).relative_to(ROOT).as_posix(): source_fingerprint(
                _module_path(m).read_text(encoding="utf-8")
            )
            for m in code_modules(*modules)
        }
        out[name] = {"version": version, "modules": modules, "version_constant": constant}
    return out


def recorded(path: Path = RECORD) -> dict[str, dict]:
    """The committed record (empty when the file does not exist)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def problems(now: dict[str, dict], record: dict[str, dict]) -> list[str]:
    """What differs between the code and the record, each with what to do; empty when in step."""
    out = []
    for name, entry in now.items():
        old = record.get(name)
        if old is None:
            out.append(
                f"{name}: no recorded fingerprint; run `{UPDATE_COMMAND}` and commit extractor_fingerprints.json"
            )
            continue
        changed = sorted(
            p
            for p in {*entry["modules"], *old["modules"]}
            if entry["modules"].get(p) != old["modules"].get(p)
        )
        if entry["version"] != old["version"]:
            out.append(
                f"{name}: version {old['version']} -> {entry['version']}; record the new code: run `{UPDATE_COMMAND}` "
                "and commit extractor_fingerprints.json"
            )
        elif changed:
            out.append(
                f"{name}: the code it computes with changed ({', '.join(changed)}) but its version is still "
                f"{entry['version']!r}, so stores keep channels computed by the old code as current. If the output "
                f"can change, bump {entry['version_constant']} and run `{UPDATE_COMMAND}`; if it cannot (a "
                f"refactor, a speed-up with identical numbers), run `{UPDATE_COMMAND} --same-output {name}`. "
                "Then commit extractor_fingerprints.json"
            )
    out += [
        f"{name}: recorded but no longer exists; run `{UPDATE_COMMAND}`"
        for name in sorted(set(record) - set(now))
    ]
    return out


def update(same_output: set[str], path: Path = RECORD) -> list[str]:
    """Write the record for the code as it stands; refuses (returns the reasons, writes nothing)
    when an extractor's code changed without a version bump and it is not in ``same_output``."""
    now, record = current(), recorded(path)
    refused = [
        p
        for p in problems(now, record)
        if "but its version is still" in p and p.split(":", 1)[0] not in same_output
    ]
    if not refused:
        path.write_text(json.dumps(now, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=UPDATE_COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--same-output",
        nargs="+",
        default=[],
        metavar="NAME",
        help="these extractors' code changed without changing any output: keep their version",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    importlib.import_module(PACKAGE)
    refused = update(set(args.same_output))
    for p in refused:
        print(f"refused: {p}", file=sys.stderr)
    if not refused:
        print(f"recorded {len(recorded())} fingerprints in {RECORD.relative_to(ROOT)}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
