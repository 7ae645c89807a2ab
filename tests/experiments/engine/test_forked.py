"""The processes backend's sweep scheduler (:class:`experiments.engine.forked.Scheduler`): outcomes in
order, forked pools over shared windowed features, slow models split into their fits, memory
budget, failures kept to their configurations, interruption."""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import replace

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from experiments.config.loading import expand, from_dict
from experiments.data.dataset import load_sessions
from experiments.engine import forked as local
from experiments.engine.forked import Scheduler
from experiments.evaluation.evaluate import (
    evaluate_trial,
    fit_groups,
    window_groups,
    window_sessions,
)
from tests.experiments.helpers import assert_same_result, config_dict, slow_group_trials


def _tables(store, cfg):
    return load_sessions(
        store, sorted({c for t in expand(cfg) for c in t.channels}), splits=cfg.splits
    )


def _outcomes(tables, groups, jobs, figures=False):
    return list(Scheduler(tables, groups, jobs, figures).outcomes())


def _groups(cfg):
    return window_groups(expand(cfg))


def _one_process_metrics(tables, groups):
    """Each configuration's metrics evaluated here, one at a time (what a sweep must give)."""
    return {
        t: evaluate_trial(t, window_sessions(tables, k)).metrics
        for k, g in groups.items()
        for t in g
    }


def _assert_same_metrics(got, expected):
    assert got.keys() == expected.keys()
    for t, m in got.items():
        assert m == pytest.approx(expected[t], abs=1e-12)


def test_windowed_nbytes_is_the_features_size(planted_store):
    d = config_dict(
        "mlruns",
        window={
            "lengths_s": [[2], [1, 4]],
            "delay_s": [1],
            "align": "centred",
            "stats": ["mean", "valid_frac", "slope"],
            "train_hop_s": 0.4,
        },
    )
    cfg = from_dict(d)
    tables = _tables(planted_store, cfg)
    keys = list(_groups(cfg))
    assert len(keys) == 4
    for key in keys:
        got = sum(s.F.nbytes for s in window_sessions(tables, key).sessions)
        assert local.windowed_nbytes(tables, key) == got > 0


@pytest.mark.parametrize("budget", ["none", "plenty"])
def test_memory_budget_keeps_the_results(planted_store, monkeypatch, budget):
    """Prefetch refused by the memory budget (the next key is windowed only once the current
    group is handed over) or granted: the same results as one process; the frame tables are
    released once the last key is windowed."""

    cfg = from_dict(config_dict("mlruns", personalization=["global"]))
    groups = _groups(cfg)
    tables = _tables(planted_store, cfg)
    expected = _one_process_metrics(tables, groups)
    events: list[tuple[str, object]] = []

    def windowing(tables_, key, threads=1, windowed=None):
        events.append(("window", key))
        return window_sessions(tables_, key, threads, windowed)

    monkeypatch.setattr(local, "window_sessions", windowing)
    monkeypatch.setattr(local, "available_memory", lambda: 0 if budget == "none" else 2**50)
    monkeypatch.setattr(local.os, "cpu_count", lambda: 3)  # a core left over: prefetch may run
    got = {}
    for o in Scheduler(tables, groups, jobs=2).outcomes():
        assert o.error == "" and o.result is not None
        events.append(("result", o.trial.window_key()))
        got[o.trial] = o.result.metrics
    assert tables == []  # released after the last key was windowed
    _assert_same_metrics(got, expected)
    windowed = [k for kind, k in events if kind == "window"]
    assert windowed == list(groups)  # each key once, in order
    if budget == "none":  # no prefetch: a key is windowed after the previous group's results
        second = events.index(("window", windowed[1]))
        assert [k for kind, k in events[:second] if kind == "result"] == [windowed[0]] * len(
            groups[windowed[0]]
        )


def test_release_free_memory_finds_glibc_malloc_trim():
    """The sweep's memory measures rely on glibc's malloc_trim: on glibc it must be found, not
    silently skipped; elsewhere releasing is a no-op."""
    import platform

    from featurestore.parallel.memory import _malloc_trim, release_free_memory

    if platform.libc_ver()[0] == "glibc":
        assert _malloc_trim() is not None
    release_free_memory()


def test_workers_draw_the_figures_the_parent_would(planted_store):
    """Forked workers return each configuration's PNGs; they are the bytes the parent would draw."""
    from experiments.evaluation.plots import trial_figures

    # two configurations (dummy and ridge, unsmoothed): one for each of the two workers
    cfg = from_dict(
        config_dict(
            "mlruns",
            feature_set=["listener"],
            personalization=["global"],
            postprocess={"smooth_s": [0], "smooth_method": ["moving_average"], "rescale": ["none"]},
        )
    )
    groups = _groups(cfg)
    tables = _tables(planted_store, cfg)
    windowed = {k: window_sessions(tables, k) for k in groups}
    outcomes = _outcomes(list(tables), groups, jobs=2, figures=True)  # it empties the list
    assert len(outcomes) == len(expand(cfg)) >= 2
    for o in outcomes:
        trial, result = o.trial, o.result
        assert o.error == "" and set(result.figures) == {
            "predicted_vs_true.png",
            "ccc_per_listener.png",
        }
        here = evaluate_trial(trial, windowed[trial.window_key()])
        assert result.figures == trial_figures(
            here.predictions, here.truth, here.scores, trial.label()
        )
    plain = _outcomes(tables, groups, jobs=2)  # no artifacts logged: nothing drawn
    assert [o.error for o in plain] == [""] * len(outcomes) and all(
        o.result.figures == {} for o in plain
    )


def _slow_model_groups(planted_store):
    """A gradient-boosting fit group with out-of-fold rescaling and unseen-listener fits (split
    into parts by the forked schedule) beside ridge groups (evaluated whole), on one key."""
    cfg, trials = slow_group_trials()
    groups = window_groups(trials)
    tables = load_sessions(
        planted_store, sorted({c for t in trials for c in t.channels}), splits=cfg.splits
    )
    return trials, groups, tables


def test_a_slow_models_fits_run_as_separate_tasks_with_the_serial_results(
    planted_store, tmp_path, monkeypatch
):
    from experiments.evaluation.evaluate import evaluate_trials, group_fit_parts

    trials, groups, tables = _slow_model_groups(planted_store)
    (key,) = groups
    w = window_sessions(tables, key)
    # as a worker of two jobs on two cores fits: one BLAS / OpenMP thread (hist_gb's sums and
    # scikit-learn 1.6's ridge solve round by the thread count)
    with threadpool_limits(limits=max(1, (os.cpu_count() or 1) // 2)):
        serial = {
            t: r for g in fit_groups(trials) for t, r in zip(g, evaluate_trials(g, w), strict=True)
        }
    log = tmp_path / "parts.txt"
    real = local.evaluate_part

    def logged(
        fit_group, w, part
    ):  # runs in a forked worker (which inherits the patch): a line in a file
        with open(log, "a") as f:
            f.write(f"{fit_group[0].model} {part}\n")
        return real(fit_group, w, part)

    monkeypatch.setattr(local, "evaluate_part", logged)
    got = _outcomes(list(tables), groups, jobs=2)
    assert [o.trial for o in got] == trials and all(o.error == "" for o in got)
    for o in got:
        assert_same_result(o.result, serial[o.trial], o.trial.label())
        assert o.result.fit_seconds > 0
    slow = next(g for g in fit_groups(trials) if g[0].model == "hist_gb")
    expected = sorted(f"hist_gb {p}" for p in group_fit_parts(slow, w))
    assert len(expected) > 10  # main, folds, and per listener: unseen and its folds
    assert (
        sorted(log.read_text().splitlines()) == expected
    )  # each part once, the ridge groups whole


def test_a_failed_part_fails_its_groups_configurations_only(planted_store, monkeypatch):
    trials, groups, tables = _slow_model_groups(planted_store)
    real = local.evaluate_part

    def broken(fit_group, w, part):
        if part.kind == "fold":
            raise RuntimeError(f"no memory for {part}")
        return real(fit_group, w, part)

    monkeypatch.setattr(local, "evaluate_part", broken)
    got = _outcomes(list(tables), groups, jobs=2)
    assert [o.trial for o in got] == trials
    for o in got:
        t, result, error = o.trial, o.result, o.error
        if t.model == "hist_gb":
            assert result is None and error.startswith(
                "RuntimeError: no memory for FitPart(kind='fold'"
            ), error
        else:
            assert error == "" and result is not None


def test_a_slow_group_that_cannot_be_split_fails_in_its_own_task(planted_store):
    """No training sessions (the train stories are not in the store): listing the parts fails in
    the parent, which then runs the group whole, so each configuration reports the error and the
    other groups still run."""

    trials, _, tables = _slow_model_groups(planted_store)
    nowhere = (
        ("train", (99,)),
        ("val", (1, 2, 4)),
        ("test", (3,)),
    )  # the store's training stories validate
    trials = [replace(t, splits=nowhere) if t.model == "hist_gb" else t for t in trials]
    groups = window_groups(trials)
    got = _outcomes(list(tables), groups, jobs=2)
    assert [o.trial for o in got] == trials
    for o in got:
        t, result, error = o.trial, o.result, o.error
        if t.model == "hist_gb":
            assert (
                result is None
                and error == "ValueError: no training sessions (stories (99,)) in the store"
            ), error
        else:
            assert error == "" and result is not None


def test_plan_starts_the_slow_groups_split_into_their_fits(planted_store):
    """Longest first: the gradient-boosting group's parts lead the queue, each part a task
    (its future unset until submitted); the ridge groups follow whole. With one job nothing
    is split."""
    from experiments.evaluation.evaluate import group_fit_parts

    trials, groups, tables = _slow_model_groups(planted_store)
    ((key, group),) = groups.items()
    w = window_sessions(tables, key)
    state = Scheduler(tables, groups, jobs=2).plan(group, w)
    slow, *fast = sorted(fit_groups(group), key=lambda g: g[0].model != "hist_gb")
    parts = group_fit_parts(slow, w)
    assert [(task.fit_group, task.part) for task in state.queue] == [
        *((slow, part) for part in parts),
        *((g, None) for g in fast),
    ]
    assert state.parts == {slow: dict.fromkeys(parts)} and state.futures == {}
    whole = Scheduler(tables, groups, jobs=1).plan(group, w)
    assert [task.part for task in whole.queue] == [None] * len(fit_groups(group))
    assert whole.parts == {}


def test_prefetch_follows_the_memory_budget(planted_store, monkeypatch):
    """The next key is windowed ahead only when a core is left over by the workers and its
    features fit PREFETCH_MEMORY_FRACTION of the available memory (or the available memory is
    unknown), and only once."""
    cfg = from_dict(config_dict("mlruns", personalization=["global"]))
    groups = _groups(cfg)
    tables = _tables(planted_store, cfg)
    need = local.windowed_nbytes(tables, list(groups)[1])
    budget = {"free": 0}
    monkeypatch.setattr(local, "available_memory", lambda: budget["free"])
    monkeypatch.setattr(local.os, "cpu_count", lambda: 2)
    threads = []

    def windowing(tables_, key, n_threads=1, windowed=None):
        threads.append(n_threads)
        return window_sessions(tables_, key, n_threads, windowed)

    monkeypatch.setattr(local, "window_sessions", windowing)
    # each scheduler its own list: windowing the last key (here key 1) empties it
    busy = Scheduler(list(tables), groups, jobs=2)  # every core fitting: not ahead ...
    try:
        budget["free"] = 10**15
        busy.prefetch(1)
        assert busy.windows == {}
        busy.prefetch(1, idle_worker=True)  # ... unless a worker has nothing left to do
        assert list(busy.windows) == [1]
        busy.windows[1].result()
        assert threads == [2]  # on every core: the last fits' cores free up meanwhile
    finally:
        busy.stop()
    monkeypatch.setattr(local.os, "cpu_count", lambda: 3)  # one core left over
    sched = Scheduler(list(tables), groups, jobs=2)
    try:
        budget["free"] = int(need / local.PREFETCH_MEMORY_FRACTION) - 1
        sched.prefetch(1)
        assert sched.windows == {}
        budget["free"] = int(need / local.PREFETCH_MEMORY_FRACTION)
        sched.prefetch(1)
        ahead = sched.windows[1]
        sched.prefetch(1)
        assert sched.windows == {1: ahead}
        assert ahead.result().sessions[0].F.shape[1] > 0
        assert threads == [2, 1]  # on the core left over
        sched.prefetch(2)  # no third key
        assert list(sched.windows) == [1]
    finally:
        sched.stop()
    unknown = Scheduler(list(tables), groups, jobs=2)
    monkeypatch.setattr(local, "available_memory", lambda: None)
    try:
        unknown.prefetch(1)
        assert list(unknown.windows) == [1]
    finally:
        unknown.stop()


def _three_sizes_cfg():
    """Feature sets speaker, listener and both: the third key's features are the first two's."""
    d = config_dict("mlruns", personalization=["global"])
    d["feature_sets"]["both"] = d["feature_sets"]["speaker"] + d["feature_sets"]["listener"]
    d["feature_set"] = ["speaker", "listener", "both"]
    return from_dict(d)


class _LivePool:
    """Stands for a fork pool that has not exited (what :meth:`Scheduler.prefetch` looks at)."""

    def shutdown(self, wait=True, cancel_futures=False):
        pass


def test_windowing_ahead_holds_no_more_features_than_the_largest_key(planted_store, monkeypatch):
    """A key is windowed ahead only when its features, with those of the pools that have not
    exited, are no larger than the largest key's: listener beside speaker's pool (their sum is
    both's size), both only once listener's pool has exited."""
    cfg = _three_sizes_cfg()
    groups = _groups(cfg)
    tables = _tables(planted_store, cfg)
    monkeypatch.setattr(local, "available_memory", lambda: None)
    monkeypatch.setattr(local.os, "cpu_count", lambda: 2)
    sched = Scheduler(list(tables), groups, jobs=2)
    try:
        speaker, listener, both = sched.nbytes
        assert [k.feature_set for k in sched.keys] == ["speaker", "listener", "both"]
        assert both == speaker + listener == max(sched.nbytes) and min(sched.nbytes) > 0
        sched.states[0] = local.WindowKeyState(pool=_LivePool())
        sched.prefetch(1, idle_worker=True)  # speaker's pool and listener's features: both's size
        assert list(sched.windows) == [1]
        assert sched.features_held() == speaker + listener
        sched.windows.pop(1).result()
        sched.states[0].pool = None  # speaker's pool exited, listener's launched
        sched.states[1] = local.WindowKeyState(pool=_LivePool())
        sched.prefetch(2, idle_worker=True)  # listener's pool and both's features: held back
        assert sched.windows == {} and sched.features_held() == listener
        sched.states[1].pool = None  # listener's pool exited
        sched.prefetch(2, idle_worker=True)
        assert list(sched.windows) == [2]
        assert sched.windows[2].result().sessions[0].F.shape[1] > 0
    finally:
        sched.stop()


def test_the_largest_key_is_windowed_after_the_pool_before_it_exits(planted_store, monkeypatch):
    """A whole sweep: both's features are computed only after listener's pool has exited; the
    results are those of one process."""
    cfg = _three_sizes_cfg()
    groups = _groups(cfg)
    tables = _tables(planted_store, cfg)
    expected = _one_process_metrics(tables, groups)
    events: list[tuple[str, str]] = []

    def windowing(tables_, key, threads=1, windowed=None):
        events.append(("window", key.feature_set))
        return window_sessions(tables_, key, threads, windowed)

    close = local.WindowKeyState.close_pool

    def closing(state, cancel=False):
        if state.pool is not None:  # the pool exits now: its key is its configurations'
            events.append(("exit", next(iter(state.futures)).feature_set))
        close(state, cancel)

    monkeypatch.setattr(local, "window_sessions", windowing)
    monkeypatch.setattr(local.WindowKeyState, "close_pool", closing)
    monkeypatch.setattr(local, "available_memory", lambda: None)
    monkeypatch.setattr(local.os, "cpu_count", lambda: 2)
    got = {o.trial: o.result.metrics for o in Scheduler(tables, groups, jobs=2).outcomes()}
    _assert_same_metrics(got, expected)
    assert [e for e in events if e[0] == "window"] == [
        ("window", "speaker"),
        ("window", "listener"),
        ("window", "both"),
    ]
    assert events.index(("exit", "listener")) < events.index(("window", "both"))


def test_outcomes_come_in_the_order_of_the_configurations(planted_store):
    """Two window keys, slow groups started first and split, results possibly finished out of
    order: outcomes in the order of each key's configurations, keys in turn."""
    cfg = from_dict(
        config_dict(
            "mlruns",
            personalization=["global"],
            models=[{"name": "ridge"}, {"name": "hist_gb", "max_iter": [10]}],
            postprocess={"smooth_s": [0, 2], "rescale": ["none"]},
        )
    )
    groups = _groups(cfg)
    assert len(groups) == 2
    got = _outcomes(_tables(planted_store, cfg), groups, jobs=2)
    assert [o.trial for o in got] == [t for g in groups.values() for t in g]
    assert all(o.error == "" and o.result is not None and not o.failed for o in got)


def test_a_failed_windowing_fails_its_keys_configurations_only(planted_store, monkeypatch):
    cfg = from_dict(config_dict("mlruns", personalization=["global"]))
    groups = _groups(cfg)
    first, bad = list(groups)

    def windowing(tables_, key, threads=1, windowed=None):
        if key == bad:
            raise MemoryError("no room for the windows")
        return window_sessions(tables_, key, threads, windowed)

    monkeypatch.setattr(local, "window_sessions", windowing)
    got = _outcomes(_tables(planted_store, cfg), groups, jobs=2)
    assert [o.trial for o in got] == [*groups[first], *groups[bad]]
    for o in got:
        t, result, error = o.trial, o.result, o.error
        if t.window_key() == bad:
            assert (
                result is None and error == "windowing failed: MemoryError: no room for the windows"
            )
        else:
            assert error == "" and result is not None


def test_closing_the_outcomes_stops_the_work(planted_store):
    """An interrupted sweep closes the iterator: queued tasks are dropped, running ones end,
    every pool's workers exit, the windowing thread stops and nothing more is yielded."""
    cfg = from_dict(config_dict("mlruns"))
    groups = _groups(cfg)
    before = set(mp.active_children())
    sched = Scheduler(_tables(planted_store, cfg), groups, jobs=2)
    outcomes = sched.outcomes()
    first = next(outcomes)
    assert first.trial == next(iter(groups.values()))[0] and first.result is not None
    assert 0 in sched.states  # the first key was launched
    outcomes.close()
    assert all(s.pool is None and s.queue == [] for s in sched.states.values())
    assert all(f.done() for f in sched.running)  # finished or cancelled
    assert sched._windowing._shutdown
    assert set(mp.active_children()) <= before
    with pytest.raises(StopIteration):
        next(outcomes)


def test_a_busy_pool_holds_one_more_task_per_worker(planted_store):
    """Besides the ``jobs`` tasks its workers run, a pool holds up to one more per worker, so a
    worker that finishes while this process logs a result starts its next task at once; no
    task goes beyond ``jobs`` into a pool with an idle worker, and the results stay in order."""
    cfg = from_dict(
        config_dict(
            "mlruns",
            personalization=["global"],
            models=[{"name": "ridge", "alpha": [1, 10, 100, 1000, 1e4, 1e5]}],
            postprocess={"smooth_s": [0], "rescale": ["none"]},
        )
    )
    groups = _groups(cfg)
    sched = Scheduler(_tables(planted_store, cfg), groups, jobs=2)
    try:
        sched.start_windowing(0)
        sched.launch(0)
        state = sched.states[0]
        queued = len(state.queue)
        assert queued == 6 and state.workers == 2
        sched.submit_free()
        assert len(sched.running) == sched.in_flight(state) == 4  # 2 running, 2 waiting
        assert len(state.queue) == queued - 4
        assert not sched.worker_idle(state)  # tasks queued: the next key is not windowed yet
        state.workers = 3  # a worker without a task: nothing beyond ``jobs`` then
        while sched.running:
            sched.running.pop().result()
        sched.submit_free()
        assert sched.in_flight(state) == 2
        while sched.running:
            sched.running.pop().result()
        assert state.queue == [] and sched.worker_idle(state)  # done: a worker is free
    finally:
        sched.stop()
    # two keys launched: only the earlier one, with work to come, holds a backlog; the later
    # key's tasks start once the earlier key's pool has exited (its fits never run beside
    # the earlier key's: their memory on top of both keys' features), then with a backlog
    sched = Scheduler(_tables(planted_store, cfg), groups, jobs=2)
    try:
        for i in (0, 1):
            sched.start_windowing(i)
            sched.launch(i)
        first, second = sched.states[0], sched.states[1]
        sched.submit_free()
        assert sched.in_flight(first) == 4 and sched.in_flight(second) == 0
        first.queue.clear()  # the earlier key's remaining tasks as if done ...
        while sched.running:
            sched.running.pop().result()
        first.parts[("pending",)] = {"a part": None}  # ... but a split group's part queued
        sched.submit_free()
        assert first.pool is not None  # the earlier key's pool waits for its part ...
        assert sched.in_flight(second) == 0 and not sched.running  # ... and the later key too
        del first.parts[("pending",)]
        sched.submit_free()  # the earlier key done: its pool exits, the later key runs
        assert first.pool is None
        assert sched.in_flight(second) == 4  # 2 running, 2 waiting
    finally:
        sched.stop()
    got = _outcomes(_tables(planted_store, cfg), groups, jobs=2)
    assert [o.trial for o in got] == [t for g in groups.values() for t in g]
    assert all(o.error == "" and o.result is not None for o in got)


def test_the_next_key_starts_while_the_last_results_are_handed_over(planted_store, monkeypatch):
    """A key's tasks all done before the caller has taken (and logged) their results: the next
    key's pool is launched meanwhile, as soon as its features are ready, not once the last
    result is taken, so the workers do not wait for the caller's logging."""
    import threading

    monkeypatch.setattr(local.os, "cpu_count", lambda: 2)  # no core left over: no early prefetch
    cfg = from_dict(config_dict("mlruns"))
    groups = _groups(cfg)
    first_key, second_key = groups
    assert len(groups[first_key]) >= 3
    ready = threading.Event()  # the second key's windowing ends once every first-key task has

    def windowing(tables_, key, threads=1, windowed=None):
        if key == second_key:
            ready.wait(timeout=60)
        return window_sessions(tables_, key, threads, windowed)

    monkeypatch.setattr(local, "window_sessions", windowing)
    sched = Scheduler(_tables(planted_store, cfg), groups, jobs=2)
    outcomes = sched.outcomes()
    try:
        got = [next(outcomes)]
        state = sched.states[0]
        assert state.queue == [] and 1 not in sched.states  # all submitted; the next key waits
        for f in set(state.futures.values()):
            f.result()  # every task of the first key done, as while the caller logs a result
        ready.set()
        got.append(next(outcomes))
        assert 1 in sched.windows or 1 in sched.states  # windowed ahead, before its turn
        if 1 in sched.windows:
            sched.windows[1].result()
            got.append(next(outcomes))
        assert len(got) < len(groups[first_key])  # the first key's results still being taken ...
        assert 1 in sched.states and sched.in_flight(sched.states[1]) > 0  # ... the next runs
        got += list(outcomes)
    finally:
        ready.set()
        outcomes.close()
    assert [o.trial for o in got] == [t for g in groups.values() for t in g]
    assert all(o.error == "" and o.result is not None for o in got)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_last_key_drops_each_table_once_windowed(planted_store, threads):
    """The last window key is the frame tables' last use: each session's table leaves the list
    once its windows are computed (their memory returns while the others are windowed); an
    earlier key keeps them all. The windows are the same as from the full list."""
    cfg = from_dict(config_dict("mlruns"))
    groups = _groups(cfg)
    assert len(groups) >= 2
    keys = list(groups)
    sched = Scheduler(_tables(planted_store, cfg), groups, jobs=2)
    try:
        n = len(sched.tables)
        sched.start_windowing(0, threads)
        first = sched.windows[0].result()
        assert sum(t is not None for t in sched.tables) == n  # an earlier key: all kept
        sched.start_windowing(len(keys) - 1, threads)
        last = sched.windows[len(keys) - 1].result()
        assert len(sched.tables) == n and all(t is None for t in sched.tables)
    finally:
        sched.stop()
    fresh = _tables(planted_store, cfg)
    for got, key in ((first, keys[0]), (last, keys[-1])):
        want = window_sessions(fresh, key)
        assert got.names == want.names
        for a, b in zip(got.sessions, want.sessions, strict=True):
            assert a.session == b.session
            np.testing.assert_array_equal(a.F, b.F)
