"""Dask: the one client helper of both packages (:func:`dask_client`; ``experiments sweep
--executor dask`` connects with it too) and the extraction's tasks (:func:`run_on_dask`).

``featurestore extract --executor dask`` starts a local cluster (processes, one thread each)
or, with ``--scheduler tcp://host:8786``, connects to an existing one. Every worker writes its
sessions' shards itself, so the store must be on a file system every worker mounts at the same
path (see docs/scaling.md).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from ..extractors import ExtractorUnavailable
from ..sources.manifest import SessionFiles
from .config import FeatureConfig
from .extract import SessionResult, extract_session

#: worker processes of the local cluster when no number is given
DEFAULT_LOCAL_WORKERS = 2
#: the interface every server of the local cluster listens on (the scheduler, its HTTP endpoint, workers)
LOCAL_HOST = "127.0.0.1"
#: how long (seconds) to wait for a first worker on an existing scheduler
WAIT_FOR_WORKERS_S = 60.0


def _import_distributed() -> Any:
    try:
        import distributed  # lazily: 0.5 s to import, only the Dask executor needs it
    except ImportError as e:  # pragma: no cover - dask[distributed] is a dependency
        raise ImportError(
            "the Dask executor needs dask.distributed: pip install 'dask[distributed]>=2024.1'"
        ) from e
    return distributed


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
    distributed = _import_distributed()
    if scheduler:
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
    try:
        client = distributed.Client(cluster)
        try:
            yield client
        finally:
            client.close()
    finally:
        cluster.close()


def n_workers_of(client: Any) -> int:
    """Number of workers currently connected to the client's scheduler."""
    return len(client.nthreads())  # scheduler_info() lists only 5 workers in some Dask versions


def _absolute(sf: SessionFiles) -> SessionFiles:
    return replace(
        sf,
        video=Path(sf.video).resolve() if sf.video else None,
        transcript=Path(sf.transcript).resolve() if sf.transcript else None,
        annotations={k: Path(p).resolve() for k, p in sf.annotations.items()},
        media={k: Path(p).resolve() for k, p in sf.media.items()},
    )


def _unavailable_here(channels: list[str], cfg: FeatureConfig) -> str:
    """On a worker: the reason an extractor (with its settings in ``cfg``) cannot run there, or ''."""
    for name in channels:
        try:
            cfg.extractor(name).check_available()
        except ExtractorUnavailable as e:
            return str(e)
    return ""


def _check_workers(client: Any, channels: list[str], cfg: FeatureConfig) -> None:
    problems = {
        addr: msg for addr, msg in client.run(_unavailable_here, list(channels), cfg).items() if msg
    }
    if problems:
        addr, msg = next(iter(sorted(problems.items())))
        raise ExtractorUnavailable(
            f"on Dask worker {addr} (and {len(problems) - 1} more): {msg}; install the same environment on every worker"
        )


def run_on_dask(
    sessions: Sequence[SessionFiles],
    store_root: str | os.PathLike[str],
    channels: list[str],
    cfg: FeatureConfig,
    force: bool,
    scheduler: str | None,
    n_workers: int | None,
    done: Callable[[SessionResult], None],
    bar: Any = None,
) -> None:
    """Run every session as a Dask task and pass each result to ``done`` as it completes (the
    Dask side of :func:`featurestore.extraction.pool.extract_many`).

    With ``scheduler``, the store and the videos must be on a shared file system (NFS, CephFS,
    Lustre) at the same absolute path on the client and every worker (relative paths are made
    absolute here); over NFS, set ``HDF5_USE_FILE_LOCKING=FALSE`` for the client and the
    workers. Without one, a local cluster of ``n_workers`` processes runs them. A session whose
    worker died is reported as failed; the others go on. ``bar``: a tqdm bar to name the cluster.
    """
    distributed = _import_distributed()
    root = str(Path(store_root).resolve())
    # paths as the client sees them, absolute: a worker's working folder may be anywhere
    by_session = [_absolute(sf) for sf in sessions]
    with dask_client(scheduler, n_workers) as client:
        _check_workers(client, channels, cfg)
        if bar is not None:
            bar.set_description(f"sessions (dask, {n_workers_of(client)} workers)")
        run = uuid.uuid4().hex[:8]
        futures = {
            client.submit(
                extract_session,
                sf,
                root,
                channels,
                cfg,
                force,
                None,
                False,
                key=f"extract-{sf.session}-{run}",
                pure=False,
            ): sf
            for sf in by_session
        }
        try:
            for fut in distributed.as_completed(futures):
                done(_result(fut, futures[fut]))
        except BaseException:
            client.cancel(list(futures))
            raise


def _result(fut: Any, sf: SessionFiles) -> SessionResult:
    """A finished task's result; a failed one when the task itself failed (its worker was lost)."""
    try:
        return cast(SessionResult, fut.result())
    except Exception as e:  # noqa: BLE001 - extract_session never raises: the worker was lost
        return SessionResult(
            sf.session,
            status="failed",
            error=f"Dask could not run this session ({type(e).__name__}: {e}); re-run to resume",
        )
