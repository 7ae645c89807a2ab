"""Where tasks run, for both packages (docs/design.md, Architecture): a :class:`~.base.Backend`
maps a function over tasks (``serial``, ``processes``, ``dask``, or one registered with
:func:`~.base.register_backend` from any module); importing this package registers the built-in ones."""

# registered in this order, the order --help lists them in
# isort: off
from . import serial, processes, dask

# isort: on
from .base import (
    Backend,
    BackendError,
    Result,
    backend_names,
    backends_help,
    check_backend,
    make_backend,
    register_backend,
    unregister_backend,
)

__all__ = [
    "Backend",
    "BackendError",
    "Result",
    "backend_names",
    "backends_help",
    "check_backend",
    "dask",
    "make_backend",
    "processes",
    "register_backend",
    "serial",
    "unregister_backend",
]
