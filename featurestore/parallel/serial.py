"""The serial backend (``backend: serial``): every task in this process, one after the other."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..processes import raise_if_terminated
from .base import Backend, R, Raises, Result, Results, T, failure, register_backend


@register_backend
class SerialBackend(Backend):
    """Tasks run here, in order (a SIGTERM swallowed by a C library is raised between them)."""

    name = "serial"
    summary = "this process, one task at a time"

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], raises: Raises = ()) -> Results[R]:
        """``fn`` over ``tasks`` here (see :meth:`Backend.map`)."""
        for task in tasks:
            raise_if_terminated()
            try:  # inline (not base.call): one frame fewer between a sweep and its fits
                result: Result[R] = Result(fn(task))
            except raises:
                raise
            except Exception as e:  # noqa: BLE001 - a failed task does not stop the others
                result = failure(e)
            yield result
        raise_if_terminated()
