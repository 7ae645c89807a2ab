"""The processes backend (``backend: processes``): tasks in ``jobs`` spawned worker processes
of this machine (here, in this process, one at a time). :func:`worker_pool` is its pool: spawned,
or forked over read-only state this process holds (a sweep's windowed features), which the
workers then share without a copy. Every worker leaves on its own once its parent is gone (a
killed run cannot stop its pool); a forked one leaves Ctrl-C to its parent, which stops the pool,
and a spawned one takes SIGTERM as Ctrl-C, so its clean-up runs (temporary shards removed). A map
stopped early (Ctrl-C, SIGTERM) kills its workers at once (:func:`stop_pool`)."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence

from ..processes import terminate_as_interrupt
from .base import Backend, R, Raises, Results, T, call, register_backend
from .serial import SerialBackend


def _leave_when_orphaned(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)


def _worker_init(forked: bool, threads: int | None, release: list | None) -> None:
    """Set up a worker: ``threads`` BLAS / OpenMP threads; a forked one keeps the inherited
    objects out of the collector (whose traversals would copy every page), empties ``release``
    (so it stops mapping what the parent is about to drop) and ignores Ctrl-C."""
    if forked:
        gc.freeze()
        if release:
            release.clear()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles it and stops the pool
    else:
        terminate_as_interrupt()
        # its own bars' lock (an unshared process lock, tqdm's default) would be a "leaked
        # semaphore" warning when stop_pool kills it
        from tqdm import tqdm  # imported here: only a spawned worker's bars need it

        tqdm.set_lock(threading.RLock())
    if threads is not None:
        # oversubscribed (a thread per core in every worker), OpenMP spins: fits take far longer
        from threadpoolctl import threadpool_limits  # only a worker with a thread budget needs it

        threadpool_limits(limits=threads)
    threading.Thread(
        target=_leave_when_orphaned, args=(os.getppid(),), name="orphan-watch", daemon=True
    ).start()


def worker_pool(
    workers: int, fork: bool = False, threads: int | None = None, release: list | None = None
) -> cf.ProcessPoolExecutor:
    """A pool of ``workers`` processes, forked (sharing what this process holds now) or spawned;
    ``threads``: each worker's BLAS / OpenMP threads; ``release``: emptied in each forked worker."""
    return cf.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=mp.get_context("fork" if fork else "spawn"),
        initializer=_worker_init,
        initargs=(fork, threads, release),
    )


@register_backend
class ProcessesBackend(Backend):
    """Tasks in ``jobs`` worker processes of this machine (see the module docstring)."""

    name = "processes"
    summary = "worker processes on this machine, --jobs at a time"

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], raises: Raises = ()) -> Results[R]:
        """``fn`` over ``tasks`` in spawned workers (here when one at a time; see :meth:`Backend.map`)."""
        if self.workers <= 1 or len(tasks) <= 1:
            yield from SerialBackend().map(fn, tasks, raises)
            return
        with worker_pool(min(self.workers, len(tasks))) as pool:
            futures = [pool.submit(fn, t) for t in tasks]
            try:
                for fut in futures:
                    yield call(cf.Future.result, fut, raises)
            except BaseException:  # Ctrl-C, SIGTERM, or closed early: no task finishes after it
                stop_pool(pool)
                raise


def stop_pool(pool: cf.ProcessPoolExecutor) -> None:
    """Drop ``pool``'s queued tasks and kill its workers now (SIGKILL: a task may be inside C
    code, openSMILE's or dlib's, which a gentler signal waits for), reaped before it returns
    (a killed writer's temporary files are then anyone's to remove)."""
    for proc in list((pool._processes or {}).values()):  # Python 3.14: pool.kill_workers()
        proc.kill()
    pool.shutdown(wait=True, cancel_futures=True)
