"""The Dask backend (``backend: dask``): tasks on a Dask cluster, a local one or the one at
``--scheduler`` (:func:`dask_client`, the one client helper of both packages). Tasks see none of
this process's state: what they read must be on a file system every worker mounts at the same
path (docs/scaling.md, A cluster). ``distributed`` is imported only when a cluster is used."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .base import Backend, R, Raises, Result, Results, T, call, register_backend

#: worker processes of the local cluster when no number is given
DEFAULT_LOCAL_WORKERS = 2
#: the interface every server of the local cluster listens on (the scheduler, its HTTP endpoint, workers)
LOCAL_HOST = "127.0.0.1"
#: how long (seconds) to wait for a first worker on an existing scheduler
WAIT_FOR_WORKERS_S = 60.0


@contextlib.contextmanager
def dask_client(
    scheduler: str | None = None, n_workers: int | None = None, connect_timeout_s: float = 30.0
) -> Iterator[Any]:
    """A ``distributed.Client`` for a ``with`` block: of the running ``scheduler``
    (``tcp://host:8786``, tried for ``connect_timeout_s``; left running), else of a local cluster
    of ``n_workers`` processes (default 2) of one thread each, listening on 127.0.0.1 only,
    without dashboard, closed at the end of the block."""
    try:
        import distributed  # 0.5 s to import: only a cluster needs it
    except ImportError as e:  # pragma: no cover - dask[distributed] is a dependency
        raise ImportError(
            "the Dask backend needs dask.distributed: pip install 'dask[distributed]>=2024.1'"
        ) from e
    if scheduler:
        try:
            client = distributed.Client(scheduler, timeout=f"{connect_timeout_s}s")
        except OSError as e:
            raise ConnectionError(
                f"cannot reach the Dask scheduler at {scheduler} ({e}); start one with `dask scheduler` "
                "and workers with `dask worker <address>`, or drop --scheduler for a local cluster"
            ) from e
        with client:
            try:
                client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS_S)
            except TimeoutError as e:
                raise ConnectionError(
                    f"no Dask worker joined the scheduler at {scheduler} within {WAIT_FOR_WORKERS_S:g} s; "
                    f"start some with `dask worker {scheduler}`"
                ) from e
            yield client
        return
    n = int(n_workers or DEFAULT_LOCAL_WORKERS)
    if n < 1:
        raise ValueError(f"a local Dask cluster needs at least 1 worker, got {n}")
    # no dashboard; the scheduler's small HTTP endpoint (health, metrics) takes a free port, not
    # 8787, on the loopback interface only (":0" would serve its logs and worker list to the network)
    cluster = distributed.LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        host=LOCAL_HOST,
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": f"{LOCAL_HOST}:0"},
    )
    with cluster, distributed.Client(cluster) as client:
        yield client


def future_result(fut: Any, raises: Raises = ()) -> Result[Any]:
    """A Dask future's result as a :class:`~.base.Result` (a lost worker's task fails with
    ``on Dask: ...``); the future is released."""
    try:
        return call(lambda f: f.result(), fut, raises, "on Dask: ")
    finally:
        fut.release()


@register_backend
class DaskBackend(Backend):
    """Tasks on ``client``'s cluster, or while :meth:`opened` a local one or the one at ``scheduler``.
    ``workers_write``: tasks write their own outputs on the workers (e.g. a sweep's child runs;
    None: the caller decides); ``split``: a task that can be split runs as parts on several workers."""

    name = "dask"
    summary = "a Dask cluster: a local one, or the one at --scheduler"
    takes_scheduler = True
    remote = True

    def __init__(
        self,
        scheduler: str | None = None,
        client: Any = None,
        workers_write: bool | None = None,
        split: bool = True,
    ) -> None:
        super().__init__(scheduler)
        self.client = client
        self.workers_write = workers_write
        self.split = bool(split)

    @contextlib.contextmanager
    def opened(self, jobs: int | None) -> Iterator[int]:
        """The cluster (a local one of ``jobs`` workers, default 2, the one at ``scheduler``, or
        ``client``'s); yields how many workers it has. ConnectionError: no scheduler at
        ``scheduler``, or no worker joined it."""
        own = self.client is None
        with dask_client(self.scheduler, jobs) if own else contextlib.nullcontext(self.client) as c:
            self.client = c
            self.workers = len(
                c.nthreads()
            )  # scheduler_info() lists only 5 workers in some versions
            try:
                yield self.workers
            finally:
                self.client = None if own else c

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], raises: Raises = ()) -> Results[R]:
        """``fn`` over ``tasks``, a Dask task each (see :meth:`Backend.map`)."""
        run = uuid.uuid4().hex[:8]
        futures = [
            self.client.submit(fn, t, key=f"task-{i}-{run}", pure=False)
            for i, t in enumerate(tasks)
        ]
        try:
            for fut in futures:
                yield future_result(fut, raises)
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def everywhere(self, fn: Callable[..., R], *args: Any) -> dict[str, R]:
        """``fn(*args)`` on every worker, by address."""
        return dict(self.client.run(fn, *args))
