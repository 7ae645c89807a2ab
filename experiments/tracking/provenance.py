"""Which code computed a result: the code fingerprint every run records and resume keys on
(docs/results.md, Resume and provenance): a SHA-256 of the package version, every source file
of ``experiments/`` and ``featurestore/`` (path and bytes) and the versions of the libraries
that compute the numbers (:data:`LIBRARIES`), the same with or without git; every default lives
in that source. Runs also record the git commit, whether the package differed from it and the
library versions.

>>> v = code_version()
>>> len(v.fingerprint), sorted(v.tags())
(16, ['code_fingerprint', 'code_version', 'git_commit', 'git_dirty', 'library_versions'])
>>> [name for name, _ in v.libraries] == list(LIBRARIES)
True
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: the packages whose source makes up the fingerprint
PACKAGES = ("experiments", "featurestore")
#: file patterns of a package's source
SOURCE_PATTERNS = ("*.py", "configs/*.yaml")
ROOT = Path(__file__).resolve().parents[2]
#: the distributions whose versions enter the fingerprint: what computes the numbers a run logs
LIBRARIES = ("numpy", "scipy", "pandas", "scikit-learn", "xgboost", "numba", "llvmlite")
#: the version recorded for a library that is not installed
ABSENT = "absent"


@dataclass(frozen=True)
class CodeVersion:
    """The code this process runs: its fingerprint, the package version and the git state."""

    fingerprint: str
    version: str
    git_commit: str  # "unknown" outside a git checkout
    git_dirty: bool | None  # the package's files differ from the commit; None without git
    libraries: tuple[tuple[str, str], ...] = ()  # (distribution, version) of each of LIBRARIES

    def tags(self) -> dict[str, str]:
        """MLflow tags: ``code_fingerprint``, ``code_version``, ``git_commit``, ``git_dirty``,
        ``library_versions`` (``name=version`` separated by spaces)."""
        dirty = "unknown" if self.git_dirty is None else str(self.git_dirty).lower()
        return {
            "code_fingerprint": self.fingerprint,
            "code_version": self.version,
            "git_commit": self.git_commit,
            "git_dirty": dirty,
            "library_versions": format_libraries(self.libraries),
        }


def package_version() -> str:
    """The installed version of the distribution (``unknown`` when not installed)."""
    try:
        return version("omg-empathy-bench")
    except PackageNotFoundError:
        return "unknown"


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution``, or :data:`ABSENT` (read from its metadata,
    without importing it)."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return ABSENT


def library_versions() -> tuple[tuple[str, str], ...]:
    """(distribution, installed version) of each of :data:`LIBRARIES`, in that order."""
    return tuple((name, installed_version(name)) for name in LIBRARIES)


def format_libraries(libraries: tuple[tuple[str, str], ...]) -> str:
    """``numpy=2.4.6 scipy=1.17.1 ...``: the ``library_versions`` tag of a run."""
    return " ".join(f"{name}={v}" for name, v in libraries)


def parse_libraries(text: str) -> dict[str, str]:
    """The inverse of :func:`format_libraries`: ``{"numpy": "2.4.6", ...}``."""
    return dict(item.split("=", 1) for item in text.split())


def source_files(root: Path = ROOT) -> list[Path]:
    """Every source file of :data:`PACKAGES` under ``root``, in a stable order."""
    files: set[Path] = set()
    for package in PACKAGES:
        for pattern in SOURCE_PATTERNS:
            files.update(p for p in (root / package).rglob(pattern) if "__pycache__" not in p.parts)
    return sorted(files)


def source_fingerprint(
    root: Path = ROOT,
    version: str | None = None,
    libraries: tuple[tuple[str, str], ...] | None = None,
) -> str:
    """16 hex digits of SHA-256 over the package version, the library versions (default: the
    installed :func:`library_versions`) and each source file's path and bytes."""
    h = hashlib.sha256((version if version is not None else package_version()).encode())
    libs = library_versions() if libraries is None else libraries
    h.update(b"\0" + format_libraries(libs).encode())
    for path in source_files(root):
        h.update(b"\0" + path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def git(*args: str, root: Path = ROOT) -> str | None:
    """Output of ``git ARGS`` run in ``root``; None outside a checkout or without git."""
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.cache
def code_version() -> CodeVersion:
    """The :class:`CodeVersion` of this process (computed once: the code does not change under it)."""
    commit = (git("rev-parse", "HEAD") or "").strip() or "unknown"
    status = (
        git("status", "--porcelain", "--", *PACKAGES, "setup.cfg") if commit != "unknown" else None
    )
    libraries = library_versions()
    return CodeVersion(
        source_fingerprint(libraries=libraries),
        package_version(),
        commit,
        None if status is None else bool(status.strip()),
        libraries,
    )
