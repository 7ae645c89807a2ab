"""The sweep on the Dask backend, on local clusters: the same metrics as the processes backend,
through SQLite and an MLflow server; a slow model's fit group split into its fits, as the
processes backend does, with the results of the group fitted whole."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from mlflow import MlflowClient

from experiments.config.loading import expand, from_dict
from experiments.data.dataset import DatasetError, load_sessions
from experiments.engine.dask import DaskSweep, clear_worker_state, evaluate_on_worker, map_on_dask
from experiments.evaluation.evaluate import (
    TaskData,
    evaluate_trials,
    fit_groups,
    group_fit_parts,
    plan_tasks,
    window_groups,
    window_sessions,
)
from experiments.studies.sweep import SweepOptions, run_sweep
from experiments.tracking.context import SweepContext
from experiments.tracking.tracker import CONFIG_HASH_TAG, resolve_tracking_uri
from featurestore import Store
from featurestore.parallel.dask import DaskBackend
from tests.experiments.helpers import (
    assert_same_metrics,
    assert_same_result,
    config_dict,
    copy_tracking_db,
    dask_cluster,
    free_port,
    loopback_server_args,
    process_group,
    running_children,
    slow_group_trials,
    wait_healthy,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def mlflow_server(tracking_dir, tmp_path_factory):
    """An MLflow tracking server (SQLite backend, proxied artifacts) on a free localhost port.

    Started first, so it boots while the other tests run; its database is a copy of the shared
    test database (creating the tables takes seconds).
    """
    folder = tmp_path_factory.mktemp("mlflow_server")
    backend = copy_tracking_db(tracking_dir, folder)
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend,
        "--artifacts-destination",
        str(folder / "artifacts"),
        *loopback_server_args(port),
    ]
    # its own process group: the CLI and the uvicorn worker it started; the database is a throwaway copy
    with process_group(cmd, folder / "server.log", env=env, cwd=folder) as proc:
        yield proc, f"http://127.0.0.1:{port}", folder


@pytest.fixture(scope="module")
def cluster(mlflow_server):
    """A 2-worker local Dask cluster shared by the tests (they reach it by its address).

    It asks for the MLflow server only so that the server is started first and boots meanwhile.
    """
    with dask_cluster(2) as c:
        yield c.scheduler_address


def dask_sweep(cfg, store, cluster, **kw):
    """``run_sweep`` of ``cfg`` on ``store`` by the Dask backend on ``cluster``, no progress bar."""
    options = SweepOptions(backend="dask", scheduler=cluster, progress=False, **kw)
    return run_sweep(cfg, store, options)


def test_dask_sweep_same_metrics_as_local_via_sqlite(
    planted_store, tracking_dir, cluster, local_reference
):
    cfg = from_dict(config_dict(tracking_dir, "dask-sqlite"))
    res = dask_sweep(cfg, planted_store, cluster, log_artifacts=False)
    assert res.n_failed == 0 and (res.table.status == "done").all()
    assert_same_metrics(res.table, local_reference)
    # the table is in configuration order, baseline first, like the processes backend's
    assert list(res.table[CONFIG_HASH_TAG]) == list(local_reference.index)
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir))
    parent = client.get_run(res.parent_run_id)
    assert parent.data.tags["backend"] == "dask" and parent.data.params["jobs"] == "2"
    assert parent.data.tags["best_run_id"] == res.best_run_id
    kids = client.search_runs(
        [res.experiment_id], f"tags.mlflow.parentRunId = '{res.parent_run_id}'", max_results=100
    )
    assert len(kids) == len(res.table)
    assert {k.data.tags["pid"] for k in kids} == {
        str(os.getpid())
    }  # the client is the only SQLite writer
    first = min(kids, key=lambda r: r.info.start_time)
    assert first.data.params["model.name"] == "dummy"


def test_store_problems_stop_the_sweep_as_locally(planted_store, tracking_dir, cluster):
    d = config_dict(tracking_dir, "dask-missing")
    d["feature_sets"] = {"au": ["listener/face_au"]}
    with pytest.raises(DatasetError, match="face_au"):
        dask_sweep(from_dict(d), planted_store, cluster, log_artifacts=False)
    with pytest.raises(ValueError, match="single writer"):
        run_sweep(
            from_dict(config_dict(tracking_dir, "x")),
            store=planted_store,
            options=SweepOptions(backend=DaskBackend(workers_write=True)),
        )


def test_workers_log_through_an_mlflow_server_once_each(
    planted_store, cluster, mlflow_server, local_reference
):
    proc, uri, folder = mlflow_server
    wait_healthy(uri, proc, log=folder / "server.log")
    d = config_dict(uri, "dask-server")
    d["feature_set"] = ["listener"]
    cfg = from_dict(d)
    res = dask_sweep(cfg, planted_store, cluster, tracking_uri=uri)
    n = len(expand(cfg))
    assert n >= 3 and res.n_failed == 0 and len(res.table) == n
    assert_same_metrics(res.table, local_reference.loc[res.table[CONFIG_HASH_TAG]])

    client = MlflowClient(tracking_uri=uri)
    kids = client.search_runs([res.experiment_id], "tags.mlflow.parentRunId != ''", max_results=100)
    hashes = [k.data.tags[CONFIG_HASH_TAG] for k in kids]
    assert (
        sorted(hashes) == sorted(res.table[CONFIG_HASH_TAG]) and len(set(hashes)) == n
    )  # once each
    assert all(
        k.info.status == "FINISHED" and k.data.tags["mlflow.parentRunId"] == res.parent_run_id
        for k in kids
    )
    assert str(os.getpid()) not in {k.data.tags["pid"] for k in kids}  # logged by the workers
    assert min(kids, key=lambda r: r.info.start_time).data.params["model.name"] == "dummy"
    best = client.get_run(res.parent_run_id)
    assert best.data.tags["best_run_id"] == res.best_run_id and res.best_run_id in {
        k.info.run_id for k in kids
    }
    # artifacts went through the server into its artifact destination
    names = {a.path for a in client.list_artifacts(res.best_run_id)}
    assert {"config.yaml", "ccc_matrix.csv", "predictions", "plots"} <= names
    assert list((folder / "artifacts").rglob("ccc_matrix.csv"))

    again = dask_sweep(cfg, planted_store, cluster, tracking_uri=uri)
    assert (again.table.status == "reused").all() and again.skipped == n
    kids = client.search_runs([res.experiment_id], "tags.mlflow.parentRunId != ''", max_results=100)
    assert len(kids) == n


def test_a_worker_killed_while_logging_leaves_no_running_run(planted_store, cluster, mlflow_server):
    """SIGKILL a Dask worker while its child run is RUNNING on the server: Dask runs the task
    again elsewhere; when the sweep ends the orphan is KILLED with a worker_lost tag naming the
    run that finished, and a resume reuses every configuration."""
    import threading

    from experiments.tracking.tracker import WORKER_LOST_TAG

    proc, uri, folder = mlflow_server
    wait_healthy(uri, proc, log=folder / "server.log")
    d = config_dict(uri, "dask-lost-worker", feature_set=["listener"])
    d["postprocess"]["smooth_s"] = [0, 1, 2]
    cfg = from_dict(d)
    client = MlflowClient(tracking_uri=uri)
    outcome: dict = {}
    sweep = threading.Thread(
        target=lambda: outcome.update(res=dask_sweep(cfg, planted_store, cluster, tracking_uri=uri))
    )
    sweep.start()
    killed: dict[str, int] = {}  # run id -> pid of the worker killed while logging it
    while (
        sweep.is_alive() and len(killed) < 2
    ):  # two at most: Dask gives up on a task after 3 lost workers
        running = running_children(client, cfg.tracking.experiment)
        for r in running:
            pid = int(r.data.tags["pid"])
            if r.info.run_id not in killed and pid not in killed.values() and pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
                killed[r.info.run_id] = pid
                break
        time.sleep(0.02)
    sweep.join(timeout=120)
    res = outcome["res"]
    assert (
        res.n_failed == 0
        and (res.table.status == "done").all()
        and len(res.table) == len(expand(cfg))
    )
    orphans = [client.get_run(r) for r in killed]
    # a kill may land just after the run finished: then nothing is orphaned by it
    lost = [r for r in orphans if r.info.status != "FINISHED"]
    assert lost, "no worker was killed while its run was RUNNING"
    done = dict(zip(res.table[CONFIG_HASH_TAG], res.table.run_id, strict=True))
    for r in lost:
        assert r.info.status == "KILLED"
        assert f"pid {killed[r.info.run_id]}" in r.data.tags[WORKER_LOST_TAG]
        assert (
            f"finished in run {done[r.data.tags[CONFIG_HASH_TAG]]}" in r.data.tags[WORKER_LOST_TAG]
        )
    parent = client.get_run(res.parent_run_id)
    assert set(parent.data.tags["lost_runs"].split(",")) == {r.info.run_id for r in lost}
    kids = client.search_runs(
        [res.experiment_id], f"tags.mlflow.parentRunId = '{res.parent_run_id}'", max_results=100
    )
    assert not [k for k in kids if k.info.status == "RUNNING"]
    again = dask_sweep(cfg, planted_store, cluster, tracking_uri=uri, log_artifacts=False)
    assert (again.table.status == "reused").all()


def _data(store, cfg, trials):
    return TaskData(
        store=str(store),
        channels=tuple(sorted({c for t in trials for c in t.channels})),
        target=cfg.target,
        splits=tuple((k, tuple(v)) for k, v in sorted(cfg.splits.items())),
        gold_standard=cfg.gold_standard,
        sessions=tuple(Store(store).list_sessions()),
    )


def test_a_task_run_again_returns_its_logged_run(planted_store, mlflow_server):
    """Dask computes a task again when the worker holding its result dies: a worker-logged
    configuration must come back as the run already logged, not as a second child run."""
    from experiments.tracking.tracker import Tracker

    proc, uri, folder = mlflow_server
    wait_healthy(uri, proc, log=folder / "server.log")
    cfg = from_dict(config_dict(uri, "dask-task-twice", feature_set=["listener"]))
    trial = expand(cfg)[-1]
    tracker = Tracker(uri, cfg.tracking.experiment)
    parent = tracker.start_run("parent")
    log = SweepContext(
        cfg=cfg,
        tracking_uri=uri,
        experiment=cfg.tracking.experiment,
        parent_run_id=parent,
        child_tags={"store_fingerprint": "f"},
        log_artifacts=False,
    )
    [task] = plan_tasks([trial], _data(planted_store, cfg, [trial]), figures=False)
    try:
        [first] = evaluate_on_worker(task, log).value
        [again] = evaluate_on_worker(task, log).value
    finally:
        clear_worker_state()
    assert first.status == again.status == "done" and again.run_id == first.run_id
    assert again.metrics["val.ccc_personalized"] == first.metrics["val.ccc_personalized"]
    kids = tracker.search(f"tags.mlflow.parentRunId = '{parent}'")
    assert [k.info.run_id for k in kids] == [first.run_id]


def test_a_slow_groups_fits_run_as_separate_dask_tasks_with_the_local_results(planted_store):
    from distributed import Client

    cfg, trials = slow_group_trials()
    data = _data(planted_store, cfg, trials)
    tables = load_sessions(planted_store, list(data.channels), splits=cfg.splits)
    (key,) = window_groups(trials)
    w = window_sessions(tables, key)
    local = {
        t: r for g in fit_groups(trials) for t, r in zip(g, evaluate_trials(g, w), strict=True)
    }
    slow = next(g for g in fit_groups(trials) if g[0].model == "hist_gb")
    n_parts = len(group_fit_parts(slow, w))
    assert n_parts > 10  # main, folds, and per listener: unseen and its folds
    tasks = plan_tasks(trials, data, figures=False)
    with dask_cluster(2) as cluster, Client(cluster) as client:
        split = DaskSweep(DaskBackend(client=client), tasks, None)
        got = list(split.results())
        assert split.split_groups == {slow[0].label(): n_parts}  # the ridge groups whole
        whole = DaskSweep(DaskBackend(client=client, split=False), tasks, None)
        unsplit = list(whole.results())
        assert whole.split_groups == {}
        log = SweepContext(cfg, "sqlite:///unused.db", "", "", {}, False)
        via_map = list(map_on_dask(DaskBackend(client=client), tasks, log))
    for results in (got, unsplit, via_map):
        assert all(r.error == "" for r in results)
        outcomes = [
            (t, v)
            for task, r in zip(tasks, results, strict=True)
            for t, v in zip(task.trials, r.value, strict=True)
        ]
        assert [t for t, _ in outcomes] == [t for task in tasks for t in task.trials]
        for t, result in outcomes:
            assert_same_result(result, local[t], t.label())
