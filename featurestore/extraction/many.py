"""Extraction of many sessions, a task per session, on a backend (:mod:`featurestore.parallel`);
each writes its own shard, a failed one is reported and the others go on. A remote backend
needs the store and the videos at the same absolute path everywhere (docs/scaling.md)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm.auto import tqdm

from ..extractors import ExtractorUnavailable
from ..parallel import Backend, Result, make_backend
from ..sources.manifest import SessionFiles
from ..storage.store import Store
from .config import FeatureConfig
from .extract import SessionResult, extract_session


@dataclass(frozen=True)
class SessionTask:
    """One session's extraction: its files, the store folder, the channels and settings, and
    where its own progress bar goes (``position``; None: no bar, on a remote worker)."""

    files: SessionFiles
    root: str
    channels: tuple[str, ...]
    cfg: FeatureConfig
    force: bool
    position: int | None


def extract_task(task: SessionTask) -> SessionResult:
    """Run one :class:`SessionTask` (see :func:`~featurestore.extraction.extract.extract_session`)."""
    t = task
    return extract_session(
        t.files, t.root, t.channels, t.cfg, t.force, t.position, t.position is not None
    )


def _unavailable_here(channels: list[str], cfg: FeatureConfig) -> str:
    """Where tasks run: the reason an extractor of ``channels`` cannot run there, or ''."""
    for name in channels:
        try:
            cfg.extractor(name).check_available()
        except ExtractorUnavailable as e:
            return str(e)
    return ""


def _check_workers(backend: Backend, channels: list[str], cfg: FeatureConfig) -> None:
    problems = {
        k: msg for k, msg in backend.everywhere(_unavailable_here, channels, cfg).items() if msg
    }
    if problems:
        place, msg = next(iter(sorted(problems.items())))
        raise ExtractorUnavailable(
            f"on {backend.name} worker {place} (and {len(problems) - 1} more): {msg}; install the "
            "same environment on every worker"
        )


def _tasks(
    sessions: Sequence[SessionFiles],
    root: Path,
    channels: list[str],
    cfg: FeatureConfig,
    force: bool,
    backend: Backend,
) -> list[SessionTask]:
    """A task per session: remote ones with absolute paths and no bar; else a bar on its worker's line."""
    if backend.remote:
        root = root.resolve()
        sessions = [
            replace(
                sf,
                video=Path(sf.video).resolve() if sf.video else None,
                transcript=Path(sf.transcript).resolve() if sf.transcript else None,
                annotations={k: Path(p).resolve() for k, p in sf.annotations.items()},
                media={k: Path(p).resolve() for k, p in sf.media.items()},
            )
            for sf in sessions
        ]
    jobs = backend.workers
    return [
        SessionTask(
            sf, str(root), tuple(channels), cfg, force, None if backend.remote else 1 + i % jobs
        )
        for i, sf in enumerate(sessions)
    ]


def _failed(sf: SessionFiles, result: Result[SessionResult]) -> SessionResult:
    """A session's result; a failed one when its task itself failed (its worker was lost)."""
    if result.value is not None:
        return result.value
    return SessionResult(
        sf.session,
        status="failed",
        error=f"could not run this session ({result.error}); re-run to resume",
    )


def extract_many(
    sessions: Sequence[SessionFiles],
    store_root: str | os.PathLike[str],
    channels: Sequence[str],
    cfg: FeatureConfig,
    force: bool = False,
    *,
    backend: str | Backend = "processes",
    jobs: int = 1,
    scheduler: str | None = None,
    on_result: Callable[[SessionResult], None] | None = None,
    progress: bool = True,
) -> list[SessionResult]:
    """Extract ``sessions`` (:func:`featurestore.sources.manifest.scan`'s) into ``store_root``,
    a task per session on ``backend``, ``jobs`` at a time (``dask``: on ``scheduler``'s cluster
    or a local one), with an overall bar when ``progress``.

    Leftover temporary shards of killed runs are removed first and every extractor of
    ``channels`` is checked once (and on every remote worker); results come back in the order
    of ``sessions``, each also handed to ``on_result``. An unknown backend, or a scheduler for
    one that joins no cluster, is a :class:`~featurestore.parallel.BackendError`. Stopped early
    (Ctrl-C, SIGTERM, an ``on_result`` that raises), the sessions still running are stopped
    and their temporary shards removed; finished shards stay.
    """
    runner = make_backend(backend, scheduler)
    Store(store_root, mode="a").clean_temp_files()
    channels = list(channels)
    for name in channels:  # fail fast, once, for an extractor that cannot run here
        cfg.extractor(name).check_available()
    results: list[SessionResult] = []
    overall = tqdm(
        total=len(sessions), desc="sessions", unit="session", position=0, disable=not progress
    )
    try:
        with runner.opened(jobs) as workers:
            if runner.remote:
                _check_workers(runner, channels, cfg)
                overall.set_description(f"sessions ({runner.name}, {workers} workers)")
            tasks = _tasks(sessions, Path(store_root), channels, cfg, force, runner)
            with contextlib.closing(runner.map(extract_task, tasks)) as mapped:
                for sf, got in zip(sessions, mapped, strict=True):
                    results.append(r := _failed(sf, got))
                    overall.update(1)
                    overall.set_postfix_str(f"failed={sum(x.failed for x in results)}")
                    if on_result:
                        on_result(r)
    except BaseException:  # Ctrl-C, SIGTERM: the map's closing stopped its workers
        Store(store_root, mode="a").clean_temp_files()  # those a killed worker left
        raise
    finally:
        overall.close()
    return results
