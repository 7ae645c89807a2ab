"""The frames cache of load_sessions: exact equality, invalidation, damage, read-only stores, races."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import experiments.data.dataset as dataset
from experiments.data.dataset import DatasetError, load_sessions
from experiments.data.frames_cache import CACHE_ENV, FOLDER_NAME, SUFFIX, FramesCache
from featurestore.storage import checksums
from featurestore.storage.store import Store
from tests.experiments.data.helpers import SPLITS, N, face_channel, write_store
from tests.experiments.helpers import ROOT

KEYS = ["listener/face_geom", "listener/egemaps"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    return write_store(tmp_path / "features", targets=("valence_self", "valence_observer_listener"))


def entries(store: Store, session: str | None = None) -> list[Path]:
    folder = store.root / FOLDER_NAME
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.name.endswith(SUFFIX) and (session is None or p.name.startswith(f"{session}."))
    )


def assert_same(a: list, b: list) -> None:
    """Two load_sessions results are equal in every field, arrays bit for bit (NaN where NaN)."""
    assert [t.session for t in a] == [t.session for t in b]
    for x, y in zip(a, b, strict=True):
        for name in (
            "listener",
            "story",
            "split",
            "speaker",
            "fps",
            "target",
            "columns",
            "channels",
        ):
            assert getattr(x, name) == getattr(y, name), name
        for name in ("X", "valid", "y", "column_channel"):
            u, v = getattr(x, name), getattr(y, name)
            assert u.dtype == v.dtype and u.shape == v.shape, name
            assert np.array_equal(u.view(np.uint8), v.view(np.uint8)), f"{x.session} {name} differs"


def no_shard_opens(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError(f"the shard was opened: {args[:1]}")

    monkeypatch.setattr(Store, "open_session", refuse)  # the store is the only door to the shards


def test_cached_tables_equal_uncached_and_warm_load_never_opens_a_shard(store, monkeypatch):
    fresh = load_sessions(store, KEYS, cache=False)
    assert not (store.root / FOLDER_NAME).exists()
    found = [str(p) for p in store.verify(check_sources=False)]  # the planted NaN in a valid row
    cold = load_sessions(store, KEYS)
    assert len(entries(store)) == 8
    # the store's own listing and checks do not see the cache folder
    assert store.list_sessions() == [t.session for t in fresh]
    assert [str(p) for p in store.verify(check_sources=False)] == found and store.temp_files() == []
    with monkeypatch.context() as m:
        no_shard_opens(m)
        warm = load_sessions(store, KEYS)
        # splits are applied after reading: story 4 is skipped, split names come from the config
        warm_split = load_sessions(store, KEYS, splits=SPLITS, threads=1)
    assert_same(fresh, cold)
    assert_same(fresh, warm)
    assert [t.split for t in warm] == ["bogus"] * 8
    assert_same(load_sessions(store, KEYS, splits=SPLITS, cache=False), warm_split)
    assert [t.split for t in warm_split[:3]] == ["val", "train", "test"]


def test_rewriting_a_shard_replaces_its_entry(store):
    load_sessions(store, KEYS)
    before = {p.name: p.stat().st_mtime_ns for p in entries(store)}
    s = "Subject_1_Story_2"
    dead = (
        store.root / FOLDER_NAME / f".{s}.0.0{SUFFIX}.tmp-99999999-abcdef12"
    )  # a killed writer's leftover
    dead.write_bytes(b"half")
    y = np.linspace(-1, 1, N).astype(np.float32)
    store.write_session(
        store.meta(s), labels={"valence_self": y}
    )  # what `featurestore labels` does
    table = {t.session: t for t in load_sessions(store, KEYS)}[s]
    np.testing.assert_array_equal(table.y, y)
    after = {p.name: p.stat().st_mtime_ns for p in entries(store)}
    (old,) = [n for n in before if n.startswith(f"{s}.")]
    (new,) = [n for n in after if n.startswith(f"{s}.")]  # replaced, not accumulated
    assert new != old and not dead.exists()
    assert {n: t for n, t in after.items() if n != new} == {
        n: t for n, t in before.items() if n != old
    }
    # an in-place edit of a shard (same file, new modification time, its checksum kept right)
    # invalidates too
    with h5py.File(store.shard_path(s), "r+") as f:
        ds = f["labels/valence_self"]
        ds[:10] = 0.5
        checksums.stamp(ds, ds[()])
    table = {t.session: t for t in load_sessions(store, KEYS)}[s]
    assert (table.y[:10] == 0.5).all() and (table.y[10:] == y[10:]).all()
    assert len(entries(store, s)) == 1


def test_a_shard_edited_outside_the_store_is_refused_not_loaded(store):
    load_sessions(store, KEYS)  # cached: the edit below must not be served from the cache either
    with h5py.File(store.shard_path("Subject_1_Story_2"), "r+") as f:
        f["labels/valence_self"][:10] = 0.5  # by hand, as a sweep on an edited store would meet it
    with pytest.raises(
        DatasetError, match=r"Subject_1_Story_2.h5: dataset labels/valence_self does not match"
    ):
        load_sessions(store, KEYS)


def test_each_request_has_its_own_entry(store):
    s = "Subject_2_Story_3"
    requests = [
        {"feature_keys": KEYS},
        {"feature_keys": KEYS[::-1]},
        {"feature_keys": KEYS[:1]},
        {"feature_keys": KEYS, "target": "valence_observer_listener"},
        {"feature_keys": KEYS, "max_gap_s": 2.0},
    ]
    for r in requests:
        load_sessions(store, sessions=[s], **r)
    names = [p.name for p in entries(store, s)]
    assert (
        len(names) == len(requests) and len({n.split(".")[1] for n in names}) == 1
    )  # one shard, five requests
    for r in requests:
        assert_same(
            load_sessions(store, sessions=[s], cache=False, **r),
            load_sessions(store, sessions=[s], **r),
        )
    assert len(entries(store, s)) == len(requests)
    gap = load_sessions(store, KEYS, sessions=[s], max_gap_s=2.0)[0]
    assert (
        gap.valid[:, 0].sum() > load_sessions(store, KEYS, sessions=[s])[0].valid[:, 0].sum()
    )  # the 1.4 s gap is bridged


def test_new_resampling_code_or_version_replaces_entries(store, monkeypatch):
    import experiments.data.frames_cache as frames_cache

    load_sessions(store, KEYS)
    first = {p.name for p in entries(store)}
    assert frames_cache.code_version([_damage]) != frames_cache.code_version([assert_same])
    monkeypatch.setattr(dataset, "_resampling_code", lambda: "edited resampling")
    load_sessions(store, KEYS)
    second = {p.name for p in entries(store)}
    monkeypatch.setattr(frames_cache, "FRAMES_VERSION", frames_cache.FRAMES_VERSION + 1)
    load_sessions(store, KEYS)
    third = {p.name for p in entries(store)}
    assert len(first) == len(second) == len(third) == 8  # replaced, not accumulated
    assert not first & second and not second & third and not first & third


@pytest.mark.parametrize("name", ["ShardReader", "Features"])
def test_the_resampling_code_covers_the_shard_reader(monkeypatch, name):
    # the shard reader in featurestore decides which arrays and labels a frame table holds: an edit
    # there must invalidate the cache like an edit of the resampling (a subclass has other source)
    before = dataset._resampling_code.__wrapped__()
    edited = type(
        name,
        (getattr(dataset, name),),
        {"read": lambda self: None, "__post_init__": lambda self: None},
    )
    monkeypatch.setattr(dataset, name, edited)
    assert dataset._resampling_code.__wrapped__() != before


def test_an_entry_is_a_json_line_and_npy_arrays(store):
    """The standard formats the module docstring promises: readable with json and numpy alone."""
    import json

    s = "Subject_2_Story_3"
    (fresh,) = load_sessions(store, KEYS, sessions=[s], cache=False)
    load_sessions(store, KEYS, sessions=[s])
    (path,) = entries(store, s)
    with open(path, "rb") as f:
        header = json.loads(f.readline())["header"]
        arrays = [np.load(f) for _ in range(4)]
        assert f.read() == b""
    assert header["session"] == s and header["keys"] == KEYS and header["target"] == "valence_self"
    assert (
        header["meta"]["columns"] == fresh.columns and header["meta"]["listener"] == fresh.listener
    )
    for got, name in zip(arrays, ("y", "valid", "column_channel", "X"), strict=True):
        want = getattr(fresh, name)
        assert got.dtype == want.dtype and np.array_equal(
            got.view(np.uint8), want.view(np.uint8)
        ), name


def test_an_entry_of_the_old_layout_is_a_miss_and_replaced(store):
    s = "Subject_1_Story_1"
    (fresh,) = load_sessions(store, KEYS, sessions=[s], cache=False)
    load_sessions(store, KEYS, sessions=[s])
    (path,) = entries(store, s)
    old = path.with_name(
        f"{s}.{'0' * 16}.{path.name.split('.')[2]}{SUFFIX}"
    )  # a version-1 entry's name
    old.write_bytes(b"OMGFRAME" + bytes(100))
    path.unlink()
    assert_same([fresh], load_sessions(store, KEYS, sessions=[s]))
    assert entries(store, s) == [path]  # rebuilt; the old-layout file is dropped as stale


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    size = len(data)
    if how == "truncated":
        del data[size - 100 :]
    elif how == "empty":
        data = bytearray()
    elif how == "bad magic":
        data[0] ^= 0xFF
    elif how == "garbled header":
        data[40] ^= 0x01
    elif how == "garbled column name":  # the header still parses: its checksum must catch it
        data[data.index(b"listener/egemaps/") + 3] ^= 0x01
    elif how == "flipped bit in X":
        data[size // 2] ^= 0x10
    elif how == "flipped bit in the last array":
        data[size - 3] ^= 0x01
    elif how == "zeroed block":
        data[size // 3 : size // 3 + 4096] = bytes(4096)
    elif how == "extra bytes":
        data += b"\0" * 64
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how",
    [
        "truncated",
        "empty",
        "bad magic",
        "garbled header",
        "garbled column name",
        "flipped bit in X",
        "flipped bit in the last array",
        "zeroed block",
        "extra bytes",
    ],
)
def test_damaged_entry_is_detected_and_rebuilt(store, how, caplog):
    s = "Subject_1_Story_1"
    fresh = load_sessions(store, KEYS, sessions=[s], cache=False)
    load_sessions(store, KEYS, sessions=[s])
    (path,) = entries(store, s)
    good = path.read_bytes()
    _damage(path, how)
    assert path.read_bytes() != good
    with caplog.at_level(logging.DEBUG, logger="experiments"):
        assert_same(fresh, load_sessions(store, KEYS, sessions=[s]))
    assert "damaged" in caplog.text or how == "empty"
    assert path.read_bytes() == good  # rebuilt from the shard, the same bytes as before


def test_unwritable_cache_folder_still_loads(store, caplog):
    fresh = load_sessions(store, KEYS, cache=False)
    (store.root / FOLDER_NAME).write_text("a file where the cache folder would go")
    with caplog.at_level(logging.DEBUG, logger="experiments"):
        assert_same(fresh, load_sessions(store, KEYS))
    assert caplog.text.count("not writable") == 1  # one debug line, not one per session


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` refusing writes for real: chmod 555, or for root (who ignores permissions) a
    read-only bind mount of it; skips the test where neither can be done."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if bind.returncode:
        pytest.skip(
            f"root cannot make a read-only folder here (mount: {bind.stderr.decode().strip()})"
        )
    try:
        ro = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True)
        if ro.returncode:
            pytest.skip(
                f"root cannot make a read-only folder here (mount: {ro.stderr.decode().strip()})"
            )
        yield
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_read_only_store_still_loads(store, caplog):
    fresh = load_sessions(store, KEYS, cache=False)
    with read_only(store.root):
        with pytest.raises(OSError):
            (store.root / "probe").touch()
        with caplog.at_level(logging.DEBUG, logger="experiments"):
            assert_same(fresh, load_sessions(store, KEYS))
            assert_same(fresh, load_sessions(store, KEYS, threads=1))
        assert not (store.root / FOLDER_NAME).exists()
    assert caplog.text.count("not writable") == 2  # one line per load, not one per session
    assert "8 of 8 sessions resampled, 0 cached" in caplog.text


def test_cache_elsewhere_or_off(store, tmp_path, monkeypatch):
    fresh = load_sessions(store, KEYS, cache=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert_same(fresh, load_sessions(store, KEYS))
    (sub,) = (tmp_path / "elsewhere").iterdir()
    assert len(list(sub.glob(f"*{SUFFIX}"))) == 8 and not (store.root / FOLDER_NAME).exists()
    monkeypatch.setenv(CACHE_ENV, "off")
    assert_same(fresh, load_sessions(store, KEYS))
    assert not (store.root / FOLDER_NAME).exists()
    monkeypatch.delenv(CACHE_ENV)
    assert_same(fresh, load_sessions(store, KEYS, cache=tmp_path / "given"))
    assert (
        len(list((tmp_path / "given").rglob(f"*{SUFFIX}"))) == 8
        and not (store.root / FOLDER_NAME).exists()
    )


def test_a_failing_load_writes_nothing_and_errors_are_unchanged(store):
    rng = np.random.default_rng(5)
    s = "Subject_2_Story_4"
    store.write_session(
        store.meta(s), drop=["listener/egemaps"], channels={"listener/face_geom": face_channel(rng)}
    )
    with pytest.raises(
        DatasetError, match=rf"session {s} has no channel listener/egemaps.*featurestore extract"
    ):
        load_sessions(store, KEYS)
    assert entries(store) == []
    load_sessions(
        store, KEYS, splits={"train": [1, 2, 3]}
    )  # story 4 skipped: the load succeeds and caches
    assert len(entries(store)) == 6
    with pytest.raises(DatasetError, match=rf"session {s} has no channel listener/egemaps"):
        load_sessions(store, KEYS)
    with pytest.raises(DatasetError, match=r"has no labels 'arousal'.*featurestore labels"):
        load_sessions(store, KEYS, "arousal", splits={"train": [1]})
    with pytest.raises(
        DatasetError, match=r"has no labels 'valence_other'.*did you mean 'valence_self'"
    ):
        load_sessions(store, KEYS, "valence_other", splits={"train": [1]})


RACER = r"""
import sys, time, hashlib
from pathlib import Path
import numpy as np
from experiments.data.dataset import load_sessions
from experiments.data.frames_cache import FramesCache
root, me, keys = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
(root.parent / f"ready-{me}").touch()
deadline = time.time() + 60
while not (root.parent / "go").exists():
    assert time.time() < deadline, "never started"
    time.sleep(0.002)
tables = load_sessions(root, keys)
# then hammer one 2 MB entry: write it again and again while the other process does the same
from experiments.data.dataset import SessionTable
from experiments.data.frames_cache import EntryKey
cache = FramesCache(root.parent / "hammer", code="x")
entry = EntryKey("Subject_9_Story_9", (1, 2, 3), tuple(keys), "valence_self", 0.5, "x")
both = [np.random.default_rng(i).normal(size=(2500, 200)).astype(np.float32) for i in (0, 1)]
X = both[int(me)]
frames = SessionTable("Subject_9_Story_9", 9, 9, "val", X, [f"c{j}" for j in range(200)], np.ones((2500, 1), bool),
                      ["a/b"], np.zeros(200, np.int64), X[:, 0].copy(), "valence_self", 1, 25.0)
for _ in range(60):
    cache.write(entry, frames)
    got = cache.read(entry)
    assert got is not None, "a torn or missing entry was read"
    assert any(np.array_equal(got.X, x) for x in both), "an entry mixing two writers was read"
h = hashlib.sha256()
for t in load_sessions(root, keys):
    h.update(t.session.encode()); h.update(t.X.tobytes()); h.update(t.valid.tobytes()); h.update(t.y.tobytes())
print(h.hexdigest())
"""


@pytest.mark.integration
def test_two_processes_writing_the_same_entries_both_load_correctly(store, tmp_path):
    import hashlib

    h = hashlib.sha256()
    for t in load_sessions(store, KEYS, cache=False):
        h.update(t.session.encode())
        h.update(t.X.tobytes())
        h.update(t.valid.tobytes())
        h.update(t.y.tobytes())
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop(CACHE_ENV, None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(store.root), str(i), ",".join(KEYS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    deadline = time.time() + 60
    while (
        not all((store.root.parent / f"ready-{i}").exists() for i in range(2))
        and time.time() < deadline
    ):
        time.sleep(0.01)
    (store.root.parent / "go").touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert out.strip() == h.hexdigest()
    assert len(entries(store)) == 8
    assert not [
        p for p in (store.root / FOLDER_NAME).iterdir() if p.name.startswith(".")
    ]  # no temporary files left
    cache = FramesCache.for_store(store.root, True, dataset._resampling_code())
    fresh = load_sessions(store, KEYS, cache=False)
    for table in fresh:  # every entry the racers left is complete and current
        entry = cache.key(
            table.session, store.shard_path(table.session), KEYS, "valence_self", dataset.MAX_GAP_S
        )
        assert_same([table], [cache.read(entry)])
