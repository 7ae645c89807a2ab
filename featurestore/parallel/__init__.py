"""Where tasks run, for both packages: a :class:`~.base.Backend` maps a function over tasks
(``serial``, ``processes``, ``dask``, or one registered with :func:`~.base.register_backend`
from any module). ``featurestore extract`` maps a session's extraction, ``experiments sweep`` a
fit group's evaluation. Importing this package registers the built-in backends (the Dask one
imports ``distributed`` only when a cluster is used)."""

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
