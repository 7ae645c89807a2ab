"""Imported timestamps that disagree with the recording: refused with the step, the span and
the recording's length, never stored as a 1000 Hz channel over a fiftieth of the recording."""

from __future__ import annotations

import numpy as np

from featurestore.extraction.imports import import_tables
from featurestore.storage.store import SessionMeta, Store
from tests.featurestore.extraction.helpers import write_openface

SESSION = "Subject_1_Story_1"


def _store(tmp_path) -> Store:
    store = Store(tmp_path / "store", mode="a")
    store.write_session(SessionMeta(SESSION, 1, 1, 1, "val", n_frames=450))  # 18 s at 25 fps
    return store


def test_openface_timestamps_at_another_rate_are_refused(tmp_path):
    """A 10 Hz clip of 18 s analysed with timestamps stepping 0.001 s (180 rows over 0.18 s)
    was stored as 1000 Hz with no warning."""
    store = _store(tmp_path)
    before = store.shard_path(SESSION).read_bytes()
    (tmp_path / "t").mkdir()
    write_openface(tmp_path / "t" / f"{SESSION}.csv", n=180, fps=1000.0)
    report = import_tables(tmp_path / "t", store.root, role="listener", channel="openface")
    (failed,) = report.failed
    assert "column 'timestamp' steps 0.001 s (1000 Hz): its 180 rows span 0.000-0.179 s" in (
        failed.error
    )
    assert f"1% of {SESSION} (18.00 s)" in failed.error and "step of 0.1 s (10 Hz)" in failed.error
    assert store.shard_path(SESSION).read_bytes() == before


def test_openface_timestamps_of_the_recording_are_imported(tmp_path):
    store = _store(tmp_path)
    (tmp_path / "t").mkdir()
    write_openface(tmp_path / "t" / f"{SESSION}.csv", n=180, fps=10.0)
    report = import_tables(tmp_path / "t", store.root, role="listener", channel="openface")
    assert not report.failed, str(report)
    ch = store.read_channel(SESSION, "listener/openface")
    np.testing.assert_allclose(np.diff(ch.time), 0.1, atol=1e-6)
