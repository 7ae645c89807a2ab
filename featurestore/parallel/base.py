"""The backend interface and registry: a :class:`Backend` maps a function over tasks somewhere
and returns one :class:`Result` per task, in their order, a task's error as a value;
:func:`register_backend` names one and :func:`make_backend` builds one by name.

>>> backend = make_backend("serial")
>>> with backend.opened(None) as workers:
...     [r.value for r in backend.map(abs, [-1, 2])], workers
([1, 2], 1)
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from ..errors import FeaturestoreError, UsageError, nearest

T = TypeVar("T")
R = TypeVar("R")
#: exception types a task raises through the map instead of returning as its error
Raises = tuple[type[BaseException], ...]


class BackendError(UsageError, ValueError):
    """An unknown backend name, or an option the backend does not take."""


class TaskError(FeaturestoreError):
    """A task's failure whose message says it all (its result's ``error`` is the message alone)."""


@dataclass(frozen=True)
class Result(Generic[R]):
    """One task's ``value``, or the ``error`` that failed it (``"TypeName: message"``)."""

    value: R | None = None
    error: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.error)


#: what a map yields: one result per task, in the tasks' order (closing it stops the work)
Results = Generator[Result[R], None, None]


def failure(e: BaseException, prefix: str = "") -> Result[Any]:
    """A failed task's result from the exception it raised."""
    text = str(e) if isinstance(e, TaskError) else f"{type(e).__name__}: {e}"
    return Result(error=prefix + text)


def call(fn: Callable[[T], R], task: T, raises: Raises, prefix: str = "") -> Result[R]:
    """``fn(task)`` as a :class:`Result` (an error's text after ``prefix``); ``raises`` propagate."""
    try:
        return Result(fn(task))
    except raises:
        raise
    except Exception as e:  # noqa: BLE001 - a failed task does not stop the others
        return failure(e, prefix)


class Backend(abc.ABC):
    """Where tasks run; see the module docstring. ``scheduler``: the address of a cluster to
    join, for a backend that has one (:attr:`takes_scheduler`)."""

    #: the name a config and ``--backend`` give it
    name: ClassVar[str] = ""
    #: one line for ``--help`` and the docs
    summary: ClassVar[str] = ""
    #: whether it joins a cluster at an address (``--scheduler``)
    takes_scheduler: ClassVar[bool] = False
    #: whether tasks may run on other machines (paths must then be absolute, on a shared
    #: file system, and nothing of this process's state is seen by a task)
    remote: ClassVar[bool] = False

    def __init__(self, scheduler: str | None = None) -> None:
        if scheduler is not None and not self.takes_scheduler:
            joins = [b.name for b in _BACKENDS.values() if b.takes_scheduler]
            raise BackendError(
                f"backend {self.name} joins no cluster: --scheduler (the address of one) is for "
                f"--backend {' or '.join(joins) or '(none registered)'}"
            )
        self.scheduler = scheduler
        #: tasks run at a time while :meth:`opened`
        self.workers = 1

    @contextlib.contextmanager
    def opened(self, jobs: int | None) -> Iterator[int]:
        """Hold what the backend needs (a cluster, ...) for the body; yields (and keeps as
        :attr:`workers`) how many tasks run at a time: ``jobs``, else 1, unless it knows better."""
        self.workers = max(1, jobs or 1)
        yield self.workers

    @abc.abstractmethod
    def map(self, fn: Callable[[T], R], tasks: Sequence[T], raises: Raises = ()) -> Results[R]:
        """``fn`` over ``tasks``: one result per task, in their order, each as soon as it and those
        before it are done. A task's exception is its result's ``error``, except one of the types
        ``raises``, which propagates; closing the iterator early stops the work still running."""

    def everywhere(self, fn: Callable[..., R], *args: Any) -> dict[str, R]:
        """``fn(*args)`` once where tasks run (each worker of a cluster), by place; here by default."""
        return {"here": fn(*args)}


_BACKENDS: dict[str, type[Backend]] = {}
B = TypeVar("B", bound=type[Backend])


def register_backend(cls: B) -> B:
    """Class decorator: make a :class:`Backend` available by its ``name``."""
    _BACKENDS[cls.name] = cls
    return cls


def unregister_backend(name: str) -> None:
    """Forget ``name`` (a test's own backend, once it has used it)."""
    _BACKENDS.pop(name, None)


def backend_names() -> list[str]:
    """The registered backends' names, in the order they were registered."""
    return list(_BACKENDS)


def backends_help() -> str:
    """``serial (this process), processes (...), ...``: each registered backend and its summary."""
    return ", ".join(f"{b.name} ({b.summary})" if b.summary else b.name for b in _BACKENDS.values())


def check_backend(name: str) -> str:
    """``name`` if a backend of that name is registered, else BackendError naming the nearest."""
    if name in _BACKENDS:
        return name
    close = nearest(name, _BACKENDS)
    hint = f" (did you mean {close!r}?)" if close else ""
    raise BackendError(f"unknown backend {name!r}{hint}; valid: {', '.join(_BACKENDS)}")


def make_backend(backend: str | Backend, scheduler: str | None = None) -> Backend:
    """``backend`` itself, or the registered backend of that name built with ``scheduler``
    (BackendError: no backend of that name, or a ``scheduler`` for one that joins no cluster)."""
    if isinstance(backend, Backend):
        return backend
    return _BACKENDS[check_backend(backend)](scheduler=scheduler)
