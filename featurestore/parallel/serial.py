"""The serial backend (``backend: serial``): every task in this process, one after the other.

>>> [r.value for r in SerialBackend().map(len, ["ab", "c"])]
[2, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from ..processes import raise_if_terminated
from .base import Backend, R, Result, T, call, register_backend


@register_backend
class SerialBackend(Backend):
    """Tasks run here, in order (a SIGTERM swallowed by a C library is raised between them)."""

    name = "serial"
    summary = "this process, one task at a time"

    def map(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        raises: tuple[type[BaseException], ...] = (),
    ) -> Iterator[Result[R]]:
        """``fn`` over ``tasks`` here (see :meth:`Backend.map`)."""
        for task in tasks:
            raise_if_terminated()
            yield call(fn, task, raises)
        raise_if_terminated()
