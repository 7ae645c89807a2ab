"""The Dask backend (``backend: dask``): tasks on a Dask cluster, the one client helper of both
packages (:func:`dask_client`).

Without ``--scheduler`` it starts a local cluster (processes, one thread each, listening on
127.0.0.1 only); with one (``tcp://host:8786``) it joins that cluster. Tasks see none of this
process's state: what they read must be on a file system every worker mounts at the same path
(docs/scaling.md, A cluster). ``distributed`` is imported only when a cluster is used.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .base import Backend, R, Raises, Results, T, call, register_backend

#: worker processes of the local cluster when no number is given
DEFAULT_LOCAL_WORKERS = 2
#: the interface every server of the local cluster listens on (the scheduler, its HTTP endpoint, workers)
LOCAL_HOST = "127.0.0.1"
#: how long (seconds) to wait for a first worker on an existing scheduler
WAIT_FOR_WORKERS_S = 60.0


def import_distributed() -> Any:
    """The ``distributed`` package (0.5 s to import: only a cluster needs it)."""
    try:
        import distributed  # lazily: see the docstring
    except ImportError as e:  # pragma: no cover - dask[distributed] is a dependency
        raise ImportError(
            "the Dask backend needs dask.distributed: pip install 'dask[distributed]>=2024.1'"
        ) from e
    return distributed


@contextlib.contextmanager
def _joined(scheduler: str, connect_timeout_s: float) -> Iterator[Any]:
    distributed = import_distributed()
    try:
        client = distributed.Client(scheduler, timeout=f"{connect_timeout_s}s")
    except OSError as e:
        raise ConnectionError(
            f"cannot reach the Dask scheduler at {scheduler} ({e}); start one with `dask scheduler` "
            "and workers with `dask worker <address>`, or drop --scheduler for a local cluster"
        ) from e
    try:
        try:
            client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS_S)
        except TimeoutError as e:
            raise ConnectionError(
                f"no Dask worker joined the scheduler at {scheduler} within {WAIT_FOR_WORKERS_S:g} s; "
                f"start some with `dask worker {scheduler}`"
            ) from e
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def dask_client(
    scheduler: str | None = None, n_workers: int | None = None, connect_timeout_s: float = 30.0
) -> Iterator[Any]:
    """A ``distributed.Client`` for the duration of a ``with`` block.

    Args:
        scheduler: address of a running scheduler (``tcp://host:8786``, as printed by
            ``dask scheduler``); the cluster is left running afterwards. None starts a
            :class:`distributed.LocalCluster` of ``n_workers`` processes with one thread each
            and no dashboard, listening on 127.0.0.1 only, closed at the end of the block.
        n_workers: worker processes of the local cluster (default 2); ignored with ``scheduler``.
        connect_timeout_s: how long to try reaching ``scheduler`` (seconds).
    """
    if scheduler:
        with _joined(scheduler, connect_timeout_s) as client:
            yield client
        return
    n = int(n_workers or DEFAULT_LOCAL_WORKERS)
    if n < 1:
        raise ValueError(f"a local Dask cluster needs at least 1 worker, got {n}")
    # no dashboard; the scheduler's small HTTP endpoint (health, metrics) takes a free port, not
    # 8787, on the loopback interface only (":0" would serve its logs and worker list to the network)
    cluster = import_distributed().LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        host=LOCAL_HOST,
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": f"{LOCAL_HOST}:0"},
    )
    try:
        client = import_distributed().Client(cluster)
        try:
            yield client
        finally:
            client.close()
    finally:
        cluster.close()


def n_workers_of(client: Any) -> int:
    """Number of workers currently connected to the client's scheduler."""
    return len(client.nthreads())  # scheduler_info() lists only 5 workers in some Dask versions


@register_backend
class DaskBackend(Backend):
    """Tasks on a Dask cluster (see the module docstring): ``client``'s, or while :meth:`opened`, a
    local cluster's or the one at ``scheduler``. ``workers_write``: tasks write their own
    outputs on the workers (e.g. a sweep's child runs; None: the caller decides); ``split``: a
    task that can be split runs as parts on several workers."""

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
        ``client``'s); yields how many workers it has.

        Raises:
            ConnectionError: no scheduler at ``scheduler``, or no worker joined it.
        """
        own = self.client is None
        with dask_client(self.scheduler, jobs) if own else contextlib.nullcontext(self.client) as c:
            self.client = c
            self.workers = n_workers_of(c)
            try:
                yield self.workers
            finally:
                self.client = None if own else c

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], raises: Raises = ()) -> Results[R]:
        """``fn`` over ``tasks``, a Dask task each (see :meth:`Backend.map`); a task whose worker
        was lost fails with ``on Dask: ...``."""
        run = uuid.uuid4().hex[:8]
        futures = [
            self.client.submit(fn, t, key=f"task-{i}-{run}", pure=False)
            for i, t in enumerate(tasks)
        ]
        try:
            for fut in futures:
                yield call(
                    lambda f: f.result(), fut, raises, "on Dask: "
                )  # a lost worker: its task fails
                fut.release()
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def everywhere(self, fn: Callable[..., R], *args: Any) -> dict[str, R]:
        """``fn(*args)`` on every worker, by address."""
        return dict(self.client.run(fn, *args))
