"""A package's public names imported on first use (PEP 562), so importing the package is light.

>>> import sys, types
>>> pkg = types.ModuleType("pkg")
>>> sys.modules["pkg"] = pkg
>>> pkg.__getattr__, pkg.__dir__ = lazy_exports("pkg", {"sqrt": "math"})
>>> pkg.sqrt(4.0), "sqrt" in dir(pkg)
(2.0, True)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: a name of ``exports`` (name -> module,
    relative to the package or absolute) is imported from its module on first use and kept in
    the package's namespace."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
