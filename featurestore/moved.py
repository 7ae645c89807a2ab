"""Old module names, importable for one more release: ``featurestore.store`` is now
``featurestore.storage.store``, and so on (:data:`MOVED`).

0.2 moved both packages' modules into layered sub-packages. A notebook that imports a module
by its old name keeps working, with a :class:`FutureWarning` that names the new one; the
public API (``from featurestore import Store``, ``from experiments import ...``) never moved.
Both packages install their table with :func:`install` when they are imported.

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     from featurestore.store import Store as OldStore
>>> from featurestore import Store
>>> OldStore is Store, str(caught[0].message).split(";")[0]
(True, 'featurestore.store moved to featurestore.storage.store')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping
from types import ModuleType

#: old dotted name -> new dotted name (featurestore's modules)
MOVED: dict[str, str] = {
    f"featurestore.{old}": f"featurestore.{new}"
    for old, new in {
        "provenance": "storage.provenance",
        "shard": "storage.shard",
        "verify": "storage.verify",
        "store": "storage.store",
        "manifest": "sources.manifest",
        "media": "sources.media",
        "annotations": "sources.annotations",
        "import_errors": "sources.import_errors",
        "transcripts": "sources.transcripts",
        "speaking": "sources.speaking",
        "config": "extraction.config",
        "derived": "extraction.derived",
        "extract": "extraction.extract",
        "pool": "extraction.pool",
        "distributed": "extraction.distributed",
        "imports": "extraction.imports",
        "tables": "extraction.tables",
    }.items()
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder that answers an old module name with the module under its new name."""

    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = dict(moved)

    def find_spec(
        self, fullname: str, path=None, target=None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = self.moved[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old name goes in the "
            "next release)",
            FutureWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module under its new name is already imported."""


def install(moved: Mapping[str, str]) -> None:
    """Answer the old names in ``moved`` (once per table; last on ``sys.meta_path``, so a real
    module of that name would win)."""
    if not any(isinstance(f, MovedModules) and f.moved == dict(moved) for f in sys.meta_path):
        sys.meta_path.append(MovedModules(moved))


install(MOVED)
