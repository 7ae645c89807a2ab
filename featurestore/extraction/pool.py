"""Extraction of many sessions on this machine: ``jobs`` at a time in spawned processes, with progress bars.

Each session runs :func:`featurestore.extraction.extract.extract_session` in a worker process and writes
its own shard (one atomic update); a failure in one session is reported in its
:class:`~featurestore.extraction.extract.SessionResult` and the others go on. The Dask executor of the
same work is :func:`featurestore.extraction.distributed.extract_many_dask`.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Sequence

from tqdm.auto import tqdm

from ..sources.manifest import SessionFiles
from ..storage.store import Store
from .config import FeatureConfig
from .extract import SessionResult, extract_session


def _init_worker() -> None:
    # A worker killed by Ctrl-C in the parent's process group cleans up through KeyboardInterrupt;
    # SIGTERM does the same (write_session removes its temporary file on any exception).
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))


def _worker(args) -> SessionResult:
    sf, root, channels, cfg, force, position = args
    return extract_session(sf, root, channels, cfg, force, position=position)


def extract_many(
    sessions: Sequence[SessionFiles],
    store_root: str | os.PathLike,
    channels: Sequence[str],
    cfg: FeatureConfig,
    force: bool = False,
    jobs: int = 1,
    on_result: Callable[[SessionResult], None] | None = None,
) -> list[SessionResult]:
    """Extract many sessions, ``jobs`` at a time in separate processes, with progress bars.

    Leftover temporary shards of killed runs are removed first. Results come back in the
    order of ``sessions``.
    """
    store = Store(store_root, mode="a")
    store.clean_temp_files()
    for name in channels:  # fail fast, once, for an extractor that cannot run here
        cfg.extractor(name).check_available()
    results: dict[str, SessionResult] = {}
    overall = tqdm(total=len(sessions), desc="sessions", unit="session", position=0)

    def done(r: SessionResult) -> None:
        results[r.session] = r
        overall.update(1)
        overall.set_postfix_str(f"failed={sum(x.failed for x in results.values())}")
        if on_result:
            on_result(r)

    try:
        if jobs <= 1:
            for sf in sessions:
                done(extract_session(sf, store_root, channels, cfg, force, position=1))
        else:
            ctx = mp.get_context("spawn")
            with cf.ProcessPoolExecutor(
                max_workers=jobs, mp_context=ctx, initializer=_init_worker
            ) as pool:
                futs = [
                    pool.submit(
                        _worker, (sf, str(store_root), list(channels), cfg, force, 1 + i % jobs)
                    )
                    for i, sf in enumerate(sessions)
                ]
                try:
                    for fut in cf.as_completed(futs):
                        done(fut.result())
                except BaseException:
                    for f in futs:
                        f.cancel()
                    raise
    finally:
        overall.close()
    return [results[s.session] for s in sessions if s.session in results]
