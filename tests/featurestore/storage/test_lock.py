"""Writers lock: two writers of one store at once lose nothing; a waiting writer says so and
gives up with a clear error after the timeout (featurestore/storage/lock.py)."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from featurestore.cli import main
from featurestore.storage import lock
from featurestore.storage.lock import LockTimeout, lock_path, shard_lock
from featurestore.storage.store import SessionMeta, Store

N_FRAMES = 50
SESSIONS = ["Subject_1_Story_1", "Subject_1_Story_2", "Subject_2_Story_1"]


def _meta(session: str) -> SessionMeta:
    listener, story = int(session.split("_")[1]), int(session.split("_")[3])
    return SessionMeta(session, listener, story, 1, "train", n_frames=N_FRAMES)


def _store(root: Path) -> Store:
    store = Store(root, mode="a")
    for s in SESSIONS:
        store.write_session(_meta(s), labels={"valence_self": np.zeros(N_FRAMES, np.float32)})
    return store


def write_labels(root: str, who: str, rounds: int, start: object) -> None:
    """One writer: ``rounds`` times, a new label target ``<who>_<round>`` in every shard."""
    start.wait()  # type: ignore[attr-defined]  # both writers begin together
    store = Store(root, mode="a")
    for r in range(rounds):
        for s in SESSIONS:
            y = np.full(N_FRAMES, r, np.float32)
            store.write_session(_meta(s), labels={f"{who}_{r}": y})


def _expected(writers: list[str], rounds: int) -> set[str]:
    return {"valence_self"} | {f"{w}_{r}" for w in writers for r in range(rounds)}


def _watch(store: Store, running: object) -> list[str]:
    """Read every shard while ``running()``; the problems a reader met (a shard it could not
    read, or a label target that went missing after it had been seen)."""
    seen: dict[str, set[str]] = {s: set() for s in SESSIONS}
    problems = []
    while running():  # type: ignore[operator]
        for s in SESSIONS:
            try:
                targets = set(store.label_targets(s))
            except Exception as e:  # noqa: BLE001 - any failed read is what this looks for
                problems.append(f"{s}: {type(e).__name__}: {e}")
                continue
            if lost := seen[s] - targets:
                problems.append(f"{s}: {sorted(lost)} disappeared")
            seen[s] |= targets
    return problems


@pytest.mark.integration  # two spawned processes
def test_two_writer_processes_lose_no_write_and_readers_see_whole_shards(tmp_path):
    store = _store(tmp_path / "features")
    rounds, writers = 12, ["a", "b"]  # 72 label writes, as in issue 38's two `labels` runs
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(len(writers))
    procs = [
        ctx.Process(target=write_labels, args=(str(store.root), w, rounds, start)) for w in writers
    ]
    for p in procs:
        p.start()
    problems = _watch(store, lambda: any(p.is_alive() for p in procs))
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    for s in SESSIONS:
        lost = _expected(writers, rounds) - set(store.label_targets(s))
        assert not lost, f"{s}: {len(lost)} of {len(writers) * rounds} writes lost"
        for w in writers:
            for r in range(rounds):
                assert (store.labels(s, f"{w}_{r}").to_numpy() == r).all()
    assert problems == []  # every read opened a whole shard that held every write before it
    assert store.list_sessions() == sorted(SESSIONS) and store.temp_files() == []
    assert (store.root / ".locks").is_dir()  # beside the shards, never one of them


def test_two_writer_threads_lose_no_write(tmp_path):
    store = _store(tmp_path / "features")
    rounds, writers = 10, ["a", "b", "c"]
    start = threading.Barrier(len(writers))
    threads = [
        threading.Thread(target=write_labels, args=(str(store.root), w, rounds, start))
        for w in writers
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for s in SESSIONS:
        assert set(store.label_targets(s)) == _expected(writers, rounds), s


def test_a_waiting_writer_says_so_once_then_writes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lock, "_said_waiting", False)
    store = _store(tmp_path / "features")
    shard = store.shard_path(SESSIONS[0])
    held = threading.Event()

    def hold() -> None:
        with shard_lock(shard):
            held.set()
            time.sleep(0.5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    for r in range(2):  # the second write waits too, but says nothing more
        store.write_session(_meta(SESSIONS[0]), labels={f"late_{r}": np.zeros(N_FRAMES)})
    holder.join()
    err = capsys.readouterr().err
    assert err.count("waiting for another writer") == 1
    assert f"waiting for another writer of {shard}" in err and str(lock_path(shard)) in err
    assert {"late_0", "late_1"} <= set(store.label_targets(SESSIONS[0]))


def test_a_writer_gives_up_after_the_timeout_and_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(lock.TIMEOUT_ENV, "0.2")
    store = _store(tmp_path / "features")
    shard = store.shard_path(SESSIONS[0])
    before = shard.read_bytes()
    with shard_lock(shard), pytest.raises(LockTimeout) as e:
        store.write_session(_meta(SESSIONS[0]), labels={"late": np.zeros(N_FRAMES)})
    assert str(shard) in str(e.value) and str(lock_path(shard)) in str(e.value)
    assert "for over 0.2 s" in str(e.value) and lock.TIMEOUT_ENV in str(e.value)
    assert shard.read_bytes() == before and store.temp_files() == []


def test_labels_command_exits_1_naming_the_lock_it_waited_for(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(lock.TIMEOUT_ENV, "0.2")
    monkeypatch.setattr(lock, "_said_waiting", False)
    store = _store(tmp_path / "features")
    ratings = tmp_path / "ratings"
    ratings.mkdir()
    (ratings / f"{SESSIONS[0]}.csv").write_text("valence\n" + "0.5\n" * N_FRAMES)
    shard = store.shard_path(SESSIONS[0])
    before = shard.read_bytes()
    with shard_lock(shard):
        code = main(["labels", str(ratings), "--target", "arousal", "--store", str(store.root)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("waiting for another writer") == 1 and str(lock_path(shard)) in err
    assert "being written by another process" in err
    assert shard.read_bytes() == before
    assert main(["labels", str(ratings), "--target", "arousal", "--store", str(store.root)]) == 0
    assert "arousal" in store.label_targets(SESSIONS[0])


@pytest.mark.parametrize("text", ["soon", "-1", "nan"])
def test_a_bad_timeout_is_named(monkeypatch, text):
    monkeypatch.setenv(lock.TIMEOUT_ENV, text)
    with pytest.raises(lock.StoreError, match=lock.TIMEOUT_ENV):
        lock.lock_timeout_s()
