"""Extraction of many sessions, one task per session, in local processes or on a Dask cluster.

Each session runs :func:`featurestore.extraction.extract.extract_session` and writes its own
shard (one atomic update); a failure in one session is reported in its
:class:`~featurestore.extraction.extract.SessionResult` and the others go on. The Dask side
(client, worker checks, tasks) is :mod:`featurestore.extraction.distributed`.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from tqdm.auto import tqdm

from ..processes import raise_if_terminated
from ..sources.manifest import SessionFiles
from ..storage.store import Store
from .config import FeatureConfig
from .distributed import run_on_dask
from .extract import SessionResult, extract_session

#: where :func:`extract_many` runs sessions (``featurestore extract --executor``)
EXECUTORS = ("local", "dask")


def _init_worker() -> None:
    # A worker killed by Ctrl-C in the parent's process group cleans up through KeyboardInterrupt;
    # SIGTERM does the same (write_session removes its temporary file on any exception).
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))


def _worker(args: tuple[Any, ...]) -> SessionResult:
    sf, root, channels, cfg, force, position = args
    return extract_session(sf, root, channels, cfg, force, position=position)


def _run_local(
    sessions: Sequence[SessionFiles],
    store_root: str | os.PathLike[str],
    channels: list[str],
    cfg: FeatureConfig,
    force: bool,
    jobs: int,
    done: Callable[[SessionResult], None],
) -> None:
    """Every session in this process (``jobs`` <= 1) or ``jobs`` spawned processes."""
    if jobs <= 1:
        for sf in sessions:
            raise_if_terminated()  # a SIGTERM swallowed inside a C library's callback
            done(extract_session(sf, store_root, channels, cfg, force, position=1))
        raise_if_terminated()
        return
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker) as pool:
        futs = [
            pool.submit(_worker, (sf, str(store_root), channels, cfg, force, 1 + i % jobs))
            for i, sf in enumerate(sessions)
        ]
        try:
            for fut in cf.as_completed(futs):
                done(fut.result())
        except BaseException:
            for f in futs:
                f.cancel()
            raise


def extract_many(
    sessions: Sequence[SessionFiles],
    store_root: str | os.PathLike[str],
    channels: Sequence[str],
    cfg: FeatureConfig,
    force: bool = False,
    *,
    executor: str = "local",
    jobs: int = 1,
    scheduler: str | None = None,
    on_result: Callable[[SessionResult], None] | None = None,
    progress: bool = True,
) -> list[SessionResult]:
    """Extract many sessions, one task per session, with an overall progress bar.

    Leftover temporary shards of killed runs are removed first and every extractor is checked
    once (and, on Dask, on every worker); results come back in the order of ``sessions``.

    Args:
        sessions: sessions to extract (from :func:`featurestore.sources.manifest.scan`).
        store_root: the store folder (on Dask with ``scheduler``: see
            :func:`featurestore.extraction.distributed.run_on_dask` for the shared file system).
        channels: extractor names (``face_geom``, ``face_au``, ``egemaps``, ...).
        cfg: extraction settings (face rate in frames per second, crop, extractor settings).
        force: recompute channels whose cache key is current.
        executor: ``local`` (``jobs`` spawned processes; 1 runs in this process) or ``dask``
            (``scheduler``'s cluster, or a local cluster of ``jobs`` workers, at least 2).
        scheduler: address of a running Dask scheduler (``tcp://host:8786``), with ``dask``.
        on_result: called with each session's result as it completes.
        progress: show the overall bar (local sessions also show their own bars).
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; use one of {', '.join(EXECUTORS)}")
    Store(store_root, mode="a").clean_temp_files()
    channels = list(channels)
    for name in channels:  # fail fast, once, for an extractor that cannot run here
        cfg.extractor(name).check_available()
    results: dict[str, SessionResult] = {}
    overall = tqdm(
        total=len(sessions), desc="sessions", unit="session", position=0, disable=not progress
    )

    def done(r: SessionResult) -> None:
        results[r.session] = r
        overall.update(1)
        overall.set_postfix_str(f"failed={sum(x.failed for x in results.values())}")
        if on_result:
            on_result(r)

    try:
        if executor == "dask":
            run_on_dask(sessions, store_root, channels, cfg, force, scheduler, jobs, done, overall)
        else:
            _run_local(sessions, store_root, channels, cfg, force, jobs, done)
    finally:
        overall.close()
    return [results[s.session] for s in sessions if s.session in results]
