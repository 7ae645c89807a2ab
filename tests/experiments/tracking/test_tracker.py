"""Tracking helpers: URI resolution, stale-run reaping, resume lookup, lock retries, and the
stores refused at start with one line (check_tracking)."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.tracking.tracker import (
    CONFIG_HASH_TAG,
    WORKER_LOST_TAG,
    Tracker,
    TrackingError,
    artifact_root_for,
    check_tracking,
    resolve_tracking_uri,
    with_retry,
)
from tests.experiments.helpers import free_port


def test_resolve_mlruns_and_folders(tmp_path, monkeypatch):
    assert (
        resolve_tracking_uri("mlruns", base=tmp_path)
        == f"sqlite:///{(tmp_path / 'mlruns' / 'mlflow.db').resolve()}"
    )
    assert (tmp_path / "mlruns").is_dir()
    monkeypatch.chdir(tmp_path)
    assert (
        resolve_tracking_uri(None) == f"sqlite:///{(tmp_path / 'mlruns' / 'mlflow.db').resolve()}"
    )
    assert (
        resolve_tracking_uri("runs/here")
        == f"sqlite:///{(tmp_path / 'runs' / 'here' / 'mlflow.db').resolve()}"
    )
    folder = tmp_path / "abs folder"
    assert resolve_tracking_uri(str(folder)) == f"sqlite:///{(folder / 'mlflow.db').resolve()}"
    assert folder.is_dir()


def test_resolve_db_path_and_scheme_uris(tmp_path):
    db = tmp_path / "nested" / "track.db"
    uri = resolve_tracking_uri(str(db))
    assert uri == f"sqlite:///{db.resolve()}"
    assert db.parent.is_dir() and not db.exists()
    assert artifact_root_for(uri) == (db.parent / "artifacts").resolve().as_uri()
    for u in ("http://127.0.0.1:5000", "https://mlflow.example.org", "postgresql://u@h/db", uri):
        assert resolve_tracking_uri(u) == u
    assert artifact_root_for("http://127.0.0.1:5000") is None


@pytest.fixture(scope="module")
def tracker(tracking_dir):
    return Tracker(tracking_dir, "tracking-unit")


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.integration
def test_reap_stale_kills_dead_runs_only(tracker):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = tracker.start_run("dead", tags={"pid": dead_pid()})
        alive = tracker.start_run("alive", tags={"pid": sleeper.pid})
        elsewhere = tracker.start_run(
            "other host", tags={"pid": dead_pid(), "host": socket.gethostname() + "-other"}
        )
        done = tracker.start_run("done", tags={"pid": dead_pid()})
        tracker.finish(done, "FINISHED")
        reaped = tracker.reap_stale()
        status = {r: tracker.client.get_run(r).info.status for r in (dead, alive, elsewhere, done)}
        assert dead in reaped and status[dead] == "KILLED"
        assert alive not in reaped and status[alive] == "RUNNING"
        assert elsewhere not in reaped and status[elsewhere] == "RUNNING"
        assert status[done] == "FINISHED"
        assert tracker.reap_stale() == []  # idempotent while the sleeper lives
    finally:
        sleeper.kill()
        sleeper.wait()
    assert alive in tracker.reap_stale()
    for r in (alive, elsewhere):
        tracker.finish(r, "KILLED")


def test_reap_children_marks_this_parents_running_children_only(tracker):
    """Children whose writer is elsewhere (another host: reap_stale leaves them) are the driver's to close."""
    other_host = {"host": socket.gethostname() + "-worker", "pid": "4242"}
    parent, other_parent = (
        tracker.start_run("parent", tags=other_host),
        tracker.start_run("other parent", tags=other_host),
    )
    retried = tracker.start_run(
        "retried", tags={CONFIG_HASH_TAG: "h-retried", **other_host}, parent_id=parent
    )
    lost = tracker.start_run(
        "lost", tags={CONFIG_HASH_TAG: "h-lost", **other_host}, parent_id=parent
    )
    done = tracker.start_run("done", tags={CONFIG_HASH_TAG: "h-done"}, parent_id=parent)
    tracker.finish(done, "FINISHED")
    elsewhere = tracker.start_run("running elsewhere", tags=other_host, parent_id=other_parent)
    assert tracker.reap_stale() == []  # another host's runs: not judged by pid
    marked = tracker.reap_children(parent, finished={"h-retried": done})
    assert sorted(marked) == sorted([retried, lost])
    runs = {r: tracker.client.get_run(r) for r in (retried, lost, done, elsewhere, parent)}
    assert runs[retried].info.status == runs[lost].info.status == "KILLED"
    assert f"run {done}" in runs[retried].data.tags[WORKER_LOST_TAG]
    assert "resumed sweep runs this configuration again" in runs[lost].data.tags[WORKER_LOST_TAG]
    assert "pid 4242" in runs[lost].data.tags[WORKER_LOST_TAG]
    assert runs[done].info.status == "FINISHED" and WORKER_LOST_TAG not in runs[done].data.tags
    assert runs[elsewhere].info.status == "RUNNING" and runs[parent].info.status == "RUNNING"
    assert tracker.reap_children(parent) == []
    for r in (elsewhere, parent, other_parent):
        tracker.finish(r, "KILLED")


def test_finished_by_hash_latest_finished_per_store(tracker):
    runs = {}
    for name, fp, status in (
        ("a1", "fpA", "FINISHED"),
        ("a2", "fpA", "FINISHED"),
        ("b", "fpB", "FINISHED"),
        ("f", "fpA", "FAILED"),
    ):
        runs[name] = tracker.start_run(
            name,
            tags={CONFIG_HASH_TAG: "h-" + ("x" if name != "b" else "y"), "store_fingerprint": fp},
        )
        tracker.finish(runs[name], status)
    everything = tracker.finished_by_hash()
    assert (
        everything["h-x"].info.run_id == runs["a2"] and everything["h-y"].info.run_id == runs["b"]
    )
    only_a = tracker.finished_by_hash(store_fingerprint="fpA")
    assert set(only_a) == {"h-x"} and only_a["h-x"].info.run_id == runs["a2"]
    assert tracker.finished_by_hash(store_fingerprint="nothing") == {}


def test_tracker_params_metrics_tags_batches(tracker):
    rid = tracker.start_run("batch", parent_id=None)
    params = {f"p{i:03d}": i for i in range(150)}
    metrics = {"good": 0.5, "nan": float("nan"), "inf": float("inf"), "none": None}
    tracker.log(rid, params=params, metrics=metrics, tags={"t": 1})
    tracker.finish(rid)
    run = tracker.client.get_run(rid)
    assert len([k for k in run.data.params if k.startswith("p")]) == 150
    assert run.data.metrics == {"good": 0.5}
    assert run.data.tags["t"] == "1" and run.data.tags["pid"] == str(os.getpid())
    assert run.info.status == "FINISHED"


def test_with_retry_retries_locks_only():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert with_retry(flaky, first_wait_s=0.001) == "ok" and len(calls) == 3

    def broken():
        calls.append(2)
        raise ValueError("no such table")

    with pytest.raises(ValueError):
        with_retry(broken, first_wait_s=0.001)
    assert calls.count(2) == 1
    with pytest.raises(TrackingError, match="stayed locked by another writer"):
        with_retry(
            lambda: (_ for _ in ()).throw(RuntimeError("database is locked")),
            attempts=2,
            first_wait_s=0.001,
        )


def test_artifacts_go_where_the_tracking_config_says(tmp_path, monkeypatch):
    """A database tracking URI with no tracking.artifacts is refused (MLflow would write into
    ./mlruns of the working folder); a configured folder is used; SQLite keeps them beside it."""
    from experiments.tracking.tracker import ArtifactLocationError, artifact_location

    monkeypatch.chdir(tmp_path)
    db = "postgresql://mlflow:pw@db.lab:5432/mlflow"
    with pytest.raises(ArtifactLocationError, match="tracking.artifacts") as e:
        artifact_location(db, "exp")
    assert "pw" not in str(e.value) and "mlflow:***@" in str(e.value)
    assert artifact_location(db, "exp", "shared/art") == (tmp_path / "shared/art").as_uri() + "/exp"
    assert artifact_location(db, "exp", "s3://bucket/art/") == "s3://bucket/art/exp"
    sqlite = resolve_tracking_uri(str(tmp_path / "runs"))
    assert artifact_location(sqlite, "exp") == (tmp_path / "runs/artifacts").as_uri() + "/exp"
    assert artifact_location("http://127.0.0.1:5000", "exp") is None  # the server decides
    assert not (tmp_path / "mlruns").exists()


# ------------------------------------------------------------------ stores refused at start
@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` read-only for the block: its mode for a user, a read-only bind mount for root
    (whom modes do not stop); skipped where root cannot mount."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
        for p in modes:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    bind = ["mount", "--bind", str(folder), str(folder)]
    if subprocess.run(bind, capture_output=True).returncode != 0:
        pytest.skip("root ignores file modes and cannot bind-mount a read-only folder here")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(folder)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            pytest.skip("root ignores file modes and cannot remount a folder read-only here")
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def sqlite_uri(db: Path) -> str:
    return f"sqlite:///{db}"


def test_a_file_that_is_not_a_database_is_refused_naming_it(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for write in (True, False):
        with pytest.raises(TrackingError, match=f"{db} is not an SQLite database") as e:
            check_tracking(sqlite_uri(db), write=write)
        assert "root:x" not in str(e.value) and "--tracking-uri" in str(e.value)


def test_a_read_only_database_and_folder_are_refused_for_writing(tmp_path):
    folder = tmp_path / "mlruns"
    folder.mkdir()
    db = folder / "mlflow.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    with read_only(folder):
        with pytest.raises(TrackingError, match=f"{db} \\(or its folder\\) is read-only"):
            check_tracking(sqlite_uri(db))
        check_tracking(sqlite_uri(db), write=False)  # reading it (export) is fine
        with pytest.raises(TrackingError, match=f"{folder} is read-only"):
            check_tracking(sqlite_uri(folder / "other.db"))
        with pytest.raises(TrackingError, match=f"{folder / 'new'}: cannot create it"):
            resolve_tracking_uri(str(folder / "new"))


@pytest.mark.integration
def test_a_database_locked_at_start_is_waited_out_saying_so(tmp_path, capfd):
    db = tmp_path / "mlflow.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    hold = "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
    hold += "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(2)"
    writer = subprocess.Popen([sys.executable, "-c", hold, str(db)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"held\n"
        started = time.monotonic()
        check_tracking(sqlite_uri(db))
        waited = time.monotonic() - started
    finally:
        writer.wait(timeout=30)
    err = capfd.readouterr().err
    assert err.count(f"tracking database {db} is locked by another writer; waiting") == 1
    assert 0.5 < waited < 30  # waited for the writer, not refused at once


@pytest.mark.parametrize("scheme", ["http", "postgresql"])
def test_an_unreachable_server_is_refused_at_once_naming_it(scheme):
    port = free_port()
    uri = f"{scheme}://user:secret@127.0.0.1:{port}/" + ("db" if scheme != "http" else "")
    with pytest.raises(TrackingError, match=f"cannot reach 127.0.0.1:{port}") as e:
        check_tracking(uri)
    assert "secret" not in str(e.value) and "--tracking-uri" in str(e.value)


def test_a_database_without_its_driver_says_what_to_install():
    pytest.importorskip("sqlalchemy")
    if __import__("importlib").util.find_spec("MySQLdb"):
        pytest.skip("mysqlclient is installed here")
    with pytest.raises(
        TrackingError, match="driver MySQLdb is not installed: pip install mysqlclient"
    ):
        check_tracking(f"mysql://u@127.0.0.1:{free_port()}/db")
