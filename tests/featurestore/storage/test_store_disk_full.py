"""A full disk while writing a shard: one :class:`DiskFullError` naming the shard and the space,
the shard unchanged, no temporary file (the real full disk: tests/featurestore/test_faults_disk_full.py)."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from featurestore.storage import store as store_module
from featurestore.storage.store import DiskFullError, SessionMeta, Store

META = SessionMeta("Subject_1_Story_1", 1, 1, 1, "train", n_frames=40)


def _stored(tmp_path) -> tuple[Store, bytes]:
    store = Store(tmp_path / "features", mode="a")
    store.write_session(META, labels={"valence_self": np.zeros(40)})
    return store, store.shard_path(META.session).read_bytes()


def test_too_little_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    store, before = _stored(tmp_path)
    monkeypatch.setattr(store_module, "_free_bytes", lambda folder: 1000)
    with pytest.raises(DiskFullError) as e:
        store.write_session(META, labels={"arousal": np.ones(40)})
    shard = store.shard_path(META.session)
    assert e.value.path == shard and e.value.free == 1000 and e.value.needed > 1000
    msg = str(e.value)
    assert msg.startswith(f"disk full: writing {shard} needs ") and "0.0 MB free in" in msg
    assert "free disk space there" in msg and "re-run" in msg
    assert shard.read_bytes() == before and store.temp_files() == []


@pytest.mark.parametrize("where", ["write", "fsync", "lock"])
def test_enospc_while_writing_is_one_error_and_the_shard_is_kept(tmp_path, monkeypatch, where):
    store, before = _stored(tmp_path)
    if where == "lock":  # no room for the lock file of a new shard
        monkeypatch.setattr(os, "open", _full(os.open, lambda path, *a, **k: ".locks" in str(path)))
    else:  # the kernel's answer to the temporary file's write (or, on NFS, its fsync)
        monkeypatch.setattr(store_module, "_free_bytes", lambda folder: -1)
        monkeypatch.setattr(os, "fsync", _full(os.fsync, lambda *a: where == "fsync"))
        if where == "write":
            monkeypatch.setattr(
                store_module, "open", _full(open, lambda p, mode: "x" in mode), False
            )
    meta = SessionMeta("Subject_1_Story_2", 1, 2, 1, "train", n_frames=40)
    for m in (META, meta):
        with pytest.raises(DiskFullError, match=f"disk full: writing .*{m.session}.h5"):
            store.write_session(m, labels={"arousal": np.ones(40)})
    assert store.shard_path(META.session).read_bytes() == before
    assert store.list_sessions() == [META.session] and store.temp_files() == []


def _full(real, when):
    """``real``, but raising ENOSPC when ``when(*args)``."""

    def call(*args, **kwargs):
        if when(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    return call
