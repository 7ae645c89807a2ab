"""The local executor: configurations evaluated on this machine, in forked worker processes.

Work is grouped by window key (feature set, window lengths, delay, alignment, statistics):
the windowed features are computed once per group in this process and shared with the
worker processes by ``fork`` (copy-on-write, never pickled per configuration). Workers fit
and score a fit group per task and draw its figures (PNG bytes returned with the result);
the process that logs only writes files, so parallel jobs never contend for the tracking
database. With one job, or a single task, everything runs in this process.

Scheduling (:func:`_parallel_trials`): one fork pool per window key, the next key's features
computed while the current key's configurations run (when they fit in memory), the slowest
models first within a key and split into their separate fits, at most ``jobs`` tasks at a
time over all pools, and each worker limited to ``cores // jobs`` BLAS / OpenMP threads.

>>> LocalExecutor().name
'local'
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import functools
import gc
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from ..config.grid import Trial, WindowKey
from ..data.dataset import load_sessions
from ..evaluation.evaluate import (
    TrialResult,
    Windowed,
    evaluate_part,
    evaluate_trials,
    group_fit_parts,
    window_sessions,
)
from ..evaluation.fitting import FitPart, PartResult
from ..evaluation.plots import load_backend
from .base import Executor, Outcome, SweepContext, fit_groups, window_groups, with_figures

_SHARED: dict[WindowKey, Windowed] = {}  # windowed features visible to forked workers


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError, TypeError):
        return None


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``; a no-op elsewhere).

    Arrays of a few tens of MB (a session's windowed features, a fit's temporaries) come from
    the heap, whose freed pages glibc keeps for reuse: hundreds of MB after a window key's
    features or a fit are dropped, which forked workers would also map."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _evaluate_shared(
    trials: Sequence[Trial], figures: bool = False, done: dict[FitPart, PartResult] | None = None
) -> list[TrialResult]:
    """Evaluate one fit group on the shared windowed features (``done``: its parts fitted in other
    tasks); with ``figures``, draw their plots here too (in a forked worker: the parent then
    only writes the bytes)."""
    try:
        results = evaluate_trials(trials, _SHARED[trials[0].window_key()], done)
        return [with_figures(r) for r in results] if figures else results
    finally:
        release_free_memory()  # an idle worker does not keep the fit's memory


def _evaluate_part_shared(trials: Sequence[Trial], part: FitPart) -> PartResult:
    """One fit part of a fit group on the shared windowed features (see :func:`_parallel_trials`)."""
    try:
        return evaluate_part(trials, _SHARED[trials[0].window_key()], part)
    finally:
        release_free_memory()


def _worker_init(threads: int | None = None, release: list | None = None) -> None:
    """Set up a forked worker: ``threads`` BLAS / OpenMP threads; ``release`` is emptied here,
    so the worker stops mapping what its items hold (the parent's frame tables)."""
    # the objects inherited from the parent are never garbage here: kept out of the collector,
    # whose traversals would otherwise write to (and so copy) every page of the parent's heap
    gc.freeze()
    if release:
        # the list is this process's copy: the parent keeps its tables; once the parent drops
        # them, their memory is freed, not kept alive by a pool forked earlier
        release.clear()
        release_free_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops the pool
    if threads is not None:
        # OpenMP (HistGradientBoosting) and BLAS would each start one thread per core in every
        # worker; oversubscribed, OpenMP spins and a fit takes several times longer
        threadpool_limits(limits=threads)
    # a killed sweep (SIGKILL) cannot stop its pool: a worker leaves on its own once orphaned,
    # instead of waiting forever on the task queue with a copy of the features
    parent = os.getppid()

    def leave_when_orphaned() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=leave_when_orphaned, name="orphan-watch", daemon=True).start()


class LocalExecutor(Executor):
    """Evaluates configurations here or, with ``ctx.jobs`` > 1, in forked worker processes."""

    name = "local"

    def run(self, todo: Sequence[Trial], ctx: SweepContext) -> Iterator[Outcome]:
        """Windowed features once per window key in this process, each fit group evaluated here or,
        with ``ctx.jobs`` > 1, in forked worker processes; outcomes in the order of ``todo``."""
        try:
            yield from _local_trials(todo, ctx)
        finally:
            _SHARED.clear()


def _local_trials(todo: Sequence[Trial], ctx: SweepContext) -> Iterator[Outcome]:
    if not todo:
        return
    jobs = ctx.jobs
    tables = load_sessions(
        ctx.store, list(ctx.channels), target=ctx.cfg.target, splits=ctx.cfg.splits
    )
    groups = window_groups(todo)
    figures = ctx.log_artifacts
    if figures:
        load_backend()  # once here: forked workers inherit matplotlib instead of importing it each
    if jobs > 1 and sum(len(fit_groups(g)) for g in groups.values()) > 1:
        yield from _parallel_trials(
            tables, groups, jobs, figures
        )  # empties ``tables`` once it is done with them
        return
    for n, (key, group) in enumerate(groups.items(), 1):
        _SHARED.clear()
        release_free_memory()  # the previous key's features
        try:
            _SHARED[key] = window_sessions(tables, key)
        except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
            for t in group:
                yield t, None, f"windowing failed: {type(e).__name__}: {e}"
            continue
        finally:
            if n == len(groups):
                tables.clear()  # every key is windowed: the frame tables are not needed any more
        for fit_group in fit_groups(group):
            try:
                results = _evaluate_shared(fit_group, figures)
            except Exception as e:  # noqa: BLE001 - one failed configuration does not stop the sweep
                for t in fit_group:
                    yield t, None, f"{type(e).__name__}: {e}"
            else:
                yield from ((t, r, "") for t, r in zip(fit_group, results, strict=True))
    _SHARED.clear()


#: models whose fit takes much longer than a linear model's: submitted first within a group,
#: so that the short ones fill the other workers meanwhile (longest-first scheduling)
_SLOW_MODELS = ("hist_gb", "xgboost", "svr")


def _expected_cost(group: Sequence[Trial]) -> int:
    trial = group[0]
    return (
        (trial.model != "dummy")
        + 2 * (trial.model in _SLOW_MODELS)
        + (trial.personalization == "per_listener")
    )


def _split(group: Sequence[Trial]) -> bool:
    """Whether a fit group's fits run as separate tasks: a slow model's (its main fit, each
    out-of-fold and unseen-listener fit, spread over the workers instead of one after another
    in one; a fast model's parts would cost more to hand around than they save)."""
    return group[0].model in _SLOW_MODELS


def _ready() -> None:
    """A no-op task: submitting it makes a fork pool start all its workers now."""


#: compute the next group's windowed features while the current group runs (faster; holds
#: two groups' features at a time instead of one) ...
PREFETCH_WINDOWS = True
#: ... when their estimated size (see :func:`windowed_nbytes`) is at most this fraction of the
#: memory available at that moment (the current group's fits still grow into the rest)
PREFETCH_MEMORY_FRACTION = 0.25


def windowed_nbytes(tables: Sequence, key: WindowKey) -> int:
    """Estimated size (bytes) of ``window_sessions(tables, key)``: frames x output columns x 4
    (float32); one column per statistic, window length and input column, and per channel
    and window length for ``valid_frac``."""
    if not tables:
        return 0
    first = tables[0]
    idx = [first.channels.index(c) for c in key.channels if c in first.channels]
    n_columns = int(np.isin(first.column_channel, idx).sum())
    stats = [s for s in key.stats if s != "valid_frac"]
    per_frame = len(key.lengths_s) * (
        n_columns * len(stats) + len(key.channels) * ("valid_frac" in key.stats)
    )
    return sum(t.n_frames for t in tables) * per_frame * 4


def available_memory() -> int | None:
    """Memory (bytes) the system can give without swapping (psutil's ``available``), or None
    when unknown."""
    import psutil  # imported here: a few milliseconds that only a parallel sweep needs

    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):  # no /proc/meminfo (a restricted container)
        return None


def _parallel_trials(
    tables, groups: dict[WindowKey, list[Trial]], jobs: int, figures: bool = False
) -> Iterator[Outcome]:
    """Configurations of every group in forked worker pools, the next group's windows meanwhile.

    With ``figures``, each worker also draws its configurations' plots (``TrialResult.figures``),
    so the parent, which logs the results one at a time, does not keep the workers waiting.

    One pool per window key, forked right after that key's windowed features are computed, so
    its workers share them copy-on-write; the parent then drops its reference, so the features
    of a group live once, in the workers that use them (never copied per configuration).
    While a group runs, a thread of this process computes the next group's features and its
    pool is forked as soon as they are ready, so that when the current group is down to its
    last long fits the next group's configurations use the free cores. At most ``jobs``
    configurations run at a time over all pools, and at most two groups' features exist at a
    time. Within a group the slowest models start first (longest-first scheduling), and a slow
    model's fit group is split into its fits (:func:`experiments.evaluation.evaluate.group_fit_parts`:
    the main fit, each out-of-fold and unseen-listener fit), which run as separate tasks on
    any worker; once they are all done, one more task post-processes and scores the group
    from their predictions (the same numbers as one task fitting them in turn). A group of
    five gradient-boosting fits then takes the time of three instead of five on two workers,
    and its last fits no longer leave the other worker idle at the end of a sweep. Each
    worker runs ``cores // jobs`` BLAS / OpenMP threads. Results are yielded in the order of
    the configurations.

    Memory: the next group's features are computed ahead only when they fit
    ``PREFETCH_MEMORY_FRACTION`` of the available memory (else once the current group is
    done); a pool exits as soon as its configurations are done, not once their results have
    been yielded; and ``tables`` is emptied as soon as the last key is windowed, before the
    last pool is forked; the workers, which never read the tables, drop their copy-on-write
    view of them at start, so no pool keeps them alive after that.
    """
    keys = list(groups)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    fork = mp.get_context("fork")
    windowing = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="windowing")
    windows: dict[int, cf.Future] = {}
    pools: dict[int, cf.ProcessPoolExecutor] = {}
    # launched groups' tasks not yet submitted: (fit group, None) evaluates a fit group whole;
    # (fit group, part) fits one part of a split group; (fit group, {part: result}) evaluates it
    # from its parts once they are all done
    waiting: dict[int, list[tuple[tuple[Trial, ...], FitPart | dict | None]]] = {}
    futures: dict[
        int, dict[Trial, cf.Future] | str
    ] = {}  # per group: each configuration's future, or why it failed
    slot: dict[Trial, int] = {}  # a configuration's place in the results of its fit group's future
    running: set[cf.Future] = set()
    # split fit groups not yet evaluated: each part's future (None while the part is queued)
    parts: dict[int, dict[tuple[Trial, ...], dict[FitPart, cf.Future | None]]] = {}

    def start_windowing(i: int) -> None:
        if i < len(keys) and i not in windows and i not in futures:
            windows[i] = windowing.submit(window_sessions, tables, keys[i])

    def prefetch(i: int) -> None:
        if not PREFETCH_WINDOWS or i >= len(keys) or i in windows or i in futures:
            return
        free = available_memory()
        if free is None or windowed_nbytes(tables, keys[i]) <= PREFETCH_MEMORY_FRACTION * free:
            start_windowing(i)

    def plan_tasks(i: int, group: list[Trial], w: Windowed) -> None:
        futures[i] = {}
        waiting[i], parts[i] = [], {}
        for fit_group in sorted(fit_groups(group), key=_expected_cost, reverse=True):
            try:
                split = group_fit_parts(fit_group, w) if jobs > 1 and _split(fit_group) else []
            except (
                ValueError
            ):  # e.g. no training sessions: the whole group's task reports it, per configuration
                split = []
            if len(split) > 1:
                parts[i][fit_group] = dict.fromkeys(split)
                waiting[i] += [(fit_group, part) for part in split]
            else:
                waiting[i].append((fit_group, None))

    def launch(i: int) -> None:
        try:
            w = windows.pop(i).result()
        except Exception as e:  # noqa: BLE001 - a bad window key fails its configurations only
            futures[i] = f"windowing failed: {type(e).__name__}: {e}"
            return
        finally:
            if i == len(keys) - 1:
                tables.clear()  # keys are windowed in order: this was the last use of the tables
        group = groups[keys[i]]
        _SHARED.clear()
        _SHARED[keys[i]] = w
        release_free_memory()  # what the windowing freed: the workers would map it for nothing
        plan_tasks(i, group, w)
        pools[i] = cf.ProcessPoolExecutor(
            max_workers=min(jobs, len(waiting[i])),
            mp_context=fork,
            initializer=_worker_init,
            initargs=(threads, tables),
        )
        pools[i].submit(_ready).result()  # with fork, every worker starts now, holding the features
        _SHARED.clear()
        del w
        # the features now live in the workers only: their pages return to the system when the
        # workers exit, instead of staying in this process's heap, mapped by the next pools too
        release_free_memory()

    def retire_finished() -> None:
        # a pool whose configurations are all done exits now, not once their results have been
        # handed over (logging them takes seconds): its workers still map a group's features
        for j in [
            j
            for j in pools
            if not waiting.get(j)
            and not parts.get(j)
            and all(f.done() for f in futures[j].values())
        ]:
            pools.pop(j).shutdown(wait=True)
            waiting.pop(j, None)

    def evaluate_split_groups() -> None:
        # a split fit group whose parts are all done is evaluated from them next (the front of
        # its pool's queue); a failed part fails the group's configurations
        for i, split in parts.items():
            for fit_group, done in list(split.items()):
                if not all(f is not None and f.done() for f in done.values()):
                    continue  # a part is still queued or running
                del split[fit_group]
                failed = next(
                    (f.exception() for f in done.values() if f.exception() is not None), None
                )
                if failed is None:
                    waiting[i].insert(
                        0, (fit_group, {part: f.result() for part, f in done.items()})
                    )
                    continue
                lost = cf.Future()  # what the group's task would have raised
                lost.set_exception(failed)
                for t in fit_group:
                    futures[i][t] = lost

    def submit_free() -> None:
        running.difference_update([f for f in running if f.done()])
        evaluate_split_groups()
        retire_finished()
        for i in sorted(waiting):
            while waiting[i] and len(running) < jobs:
                fit_group, task = waiting[i].pop(0)
                if isinstance(task, FitPart):
                    fut = pools[i].submit(_evaluate_part_shared, fit_group, task)
                    parts[i][fit_group][task] = fut
                else:
                    fut = pools[i].submit(_evaluate_shared, fit_group, figures, task)
                    for k, t in enumerate(fit_group):
                        futures[i][t] = fut
                        slot[t] = k
                running.add(fut)

    try:
        for i, key in enumerate(keys):
            if i not in futures:
                start_windowing(i)
                launch(i)
            prefetch(i + 1)
            submit_free()
            for t in groups[key]:
                if isinstance(futures[i], str):
                    yield t, None, futures[i]
                    continue
                while t not in futures[i] or not futures[i][t].done():
                    prefetch(i + 1)  # again: memory may have been freed since
                    nxt = windows.get(i + 1)
                    cf.wait(
                        [*running, *([nxt] if nxt is not None else [])],
                        return_when=cf.FIRST_COMPLETED,
                    )
                    if nxt is not None and nxt.done():
                        launch(i + 1)  # the next group's workers take the cores this one frees
                    submit_free()
                # before handing over (the caller logs for a while): start queued configurations,
                # and let a pool whose configurations are all done exit
                submit_free()
                try:
                    result = futures[i][t].result()[slot[t]]
                except Exception as e:  # noqa: BLE001 - one failed configuration does not stop the sweep
                    yield t, None, f"{type(e).__name__}: {e}"
                else:
                    yield t, result, ""
                result = None
                release_free_memory()  # what the caller's logging (result, artifact files) left in the heap
            if i in pools:
                pools.pop(i).shutdown(wait=True)
                waiting.pop(i, None)
            futures[i] = "done"  # the results were handed over: do not keep them
    finally:
        for i in list(waiting):
            waiting[i].clear()
        for f in running:
            f.cancel()
        for pool in pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        windowing.shutdown(wait=True, cancel_futures=True)
        _SHARED.clear()
