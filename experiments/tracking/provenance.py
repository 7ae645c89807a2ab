"""Which code computed a result: the fingerprint of the package's source and :data:`LIBRARIES`' versions every run
records and resume keys on, plus the git state (docs/results.md, Resume and provenance)."""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from featurestore.storage import provenance

#: the packages whose source (``*.py``, ``configs/*.yaml``) makes up the fingerprint
PACKAGES = ("experiments", "featurestore")
ROOT = Path(__file__).resolve().parents[2]
#: the distributions whose versions enter the fingerprint: what computes the numbers a run logs
LIBRARIES = ("numpy", "scipy", "pandas", "scikit-learn", "xgboost", "numba", "llvmlite")


@dataclass(frozen=True)
class CodeVersion:
    """The code this process runs: fingerprint, version, git commit and state (None: no git), library versions."""

    fingerprint: str
    version: str
    git_commit: str
    git_dirty: bool | None
    libraries: tuple[tuple[str, str], ...] = ()

    def tags(self) -> dict[str, str]:
        """The MLflow tags of the code version."""
        return {
            "code_fingerprint": self.fingerprint,
            "code_version": self.version,
            "git_commit": self.git_commit,
            "git_dirty": "unknown" if self.git_dirty is None else str(self.git_dirty).lower(),
            "library_versions": " ".join(f"{name}={v}" for name, v in self.libraries),
        }


def package_version() -> str:
    """The installed version of the distribution (``unknown`` when not installed)."""
    try:
        return version("omg-empathy-bench")
    except PackageNotFoundError:
        return "unknown"


def library_versions() -> tuple[tuple[str, str], ...]:
    """(distribution, installed version) of each of :data:`LIBRARIES`, in that order."""
    return provenance.library_versions(LIBRARIES)


def parse_libraries(text: str) -> dict[str, str]:
    """A run's ``library_versions`` tag as ``{"numpy": "2.4.6", ...}``."""
    return dict(item.split("=", 1) for item in text.split())


def source_fingerprint(
    root: Path = ROOT,
    version: str | None = None,
    libraries: tuple[tuple[str, str], ...] | None = None,
) -> str:
    """16 hex digits over the package and library versions and each source file of :data:`PACKAGES` under ``root``."""
    files = {
        p
        for package in PACKAGES
        for pattern in ("*.py", "configs/*.yaml")
        for p in (root / package).rglob(pattern)
        if "__pycache__" not in p.parts
    }
    return provenance.code_fingerprint(
        sorted(files),
        library_versions() if libraries is None else libraries,
        root=root,
        salt=package_version() if version is None else version,
    )


def _git(*args: str) -> str | None:
    """Output of ``git ARGS`` in the checkout; None outside one or without git."""
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.cache
def code_version() -> CodeVersion:
    """The :class:`CodeVersion` of this process (computed once)."""
    commit = (_git("rev-parse", "HEAD") or "").strip() or "unknown"
    status = (
        _git("status", "--porcelain", "--", *PACKAGES, "setup.cfg") if commit != "unknown" else None
    )
    libraries = library_versions()
    return CodeVersion(
        source_fingerprint(libraries=libraries),
        package_version(),
        commit,
        None if status is None else bool(status.strip()),
        libraries,
    )
