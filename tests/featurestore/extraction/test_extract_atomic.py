"""A session's shard update is one atomic write: its new channels and its manifest's changed
ratings land together or not at all. A real ``featurestore extract`` subprocess (real h5py
writes) is SIGKILLed at the rename of the shard, before or right after it lands; only the
place of the kill is patched in (:data:`KILLER`, around ``os.replace`` and ``os.rename``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from featurestore.cli import main
from featurestore.storage.store import Store
from tests.featurestore.helpers import make_video

ROOT = Path(__file__).resolve().parents[3]
SESSION = "rec01"

#: ``featurestore ARGS`` killed with SIGKILL when it renames a file over the shard SHARD:
#: ``before`` the first such rename, or ``after`` it (where a second write would begin)
KILLER = """
import os, signal, sys
from pathlib import Path

shard, when = Path(sys.argv[1]).resolve(), sys.argv[2]


def killing(real):
    def rename(src, dst, *args, **kwargs):
        if Path(dst).resolve() != shard:
            return real(src, dst, *args, **kwargs)
        if when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    return rename


os.replace, os.rename = killing(os.replace), killing(os.rename)

from featurestore.cli import main

sys.exit(main(sys.argv[3:]))
"""


def corpus(folder: Path, energy: float, empathy: float) -> Path:
    """A one-recording manifest: a 1 s clip, a 10 Hz table imported as ``scene/mic`` (every
    row ``energy``) and a whole-session rating ``empathy``."""
    if not (folder / "cam.mp4").exists():
        make_video(folder / "cam.mp4", n_frames=25, audio=False)
    rows = "\n".join(f"{t:.1f},{energy}" for t in np.arange(10) / 10)
    (folder / "mic.csv").write_text("time,energy\n" + rows + "\n")
    manifest = folder / "m.csv"
    manifest.write_text(
        "session,person,group,video_person,import_scene_mic,rating_empathy\n"
        f"{SESSION},p01,talk,cam.mp4,mic.csv,{empathy}\n"
    )
    return manifest


def extract_args(manifest: Path, store: Path) -> list[str]:
    # speech is skipped without a transcript: the table and the rating are all there is to do
    return ["extract", "--manifest", str(manifest), "--store", str(store), "--channels", "speech"]


def stored(store: Path) -> tuple[float, float]:
    """The shard's ``scene/mic`` energy and ``empathy`` rating."""
    st = Store(store)
    return float(st.read_channel(SESSION, "scene/mic").data[0, 0]), st.session_label(
        SESSION, "empathy"
    )


@pytest.fixture
def updated(tmp_path):
    """A store extracted from the corpus (energy 0.5, empathy 3), then a corpus whose table
    and rating both changed (energy 0.75, empathy 1; both exact in float32): the next extract updates both."""
    data, store = tmp_path / "data", tmp_path / "store"
    data.mkdir()
    assert main(extract_args(corpus(data, 0.5, 3.0), store)) == 0
    assert stored(store) == (0.5, 3.0)
    return corpus(data, 0.75, 1.0), store


def killed(tmp_path: Path, args: list[str], shard: Path, when: str) -> None:
    """Run ``featurestore ARGS`` to its SIGKILL at the rename of ``shard`` (``when``)."""
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, str(script), str(shard), when, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_kill_before_the_rename_leaves_the_old_shard_byte_for_byte(updated, tmp_path):
    manifest, store = updated
    shard = Store(store).shard_path(SESSION)
    old = shard.read_bytes()
    killed(tmp_path, extract_args(manifest, store), shard, "before")
    assert shard.read_bytes() == old  # unchanged: old channels and old ratings
    st = Store(store)
    assert st.list_sessions() == [SESSION]  # the killed writer's temporary file is no shard
    assert st.verify(check_sources=False) == []  # nor a problem
    assert main(extract_args(manifest, store)) == 0  # a re-run removes it and does the update
    assert stored(store) == (0.75, 1.0) and st.temp_files() == []


def test_a_kill_after_the_rename_leaves_the_whole_update(updated, tmp_path):
    """Where the old two-step update had renamed the new channels in and not yet the ratings."""
    manifest, store = updated
    shard = Store(store).shard_path(SESSION)
    killed(tmp_path, extract_args(manifest, store), shard, "after")
    assert stored(store) == (0.75, 1.0)  # channels and ratings, together
    assert Store(store).temp_files() == []
    before = shard.stat().st_mtime_ns
    assert main(extract_args(manifest, store)) == 0  # all current: nothing rewritten
    assert shard.stat().st_mtime_ns == before


def test_a_changed_rating_alone_rewrites_the_shard_once(updated):
    manifest, store = updated
    assert main(extract_args(manifest, store)) == 0
    corpus(manifest.parent, 0.75, 2.0)
    shard = Store(store).shard_path(SESSION)
    before = shard.read_bytes()
    assert main(extract_args(manifest, store)) == 0
    assert shard.read_bytes() != before and stored(store) == (0.75, 2.0)
