"""Sources tracked by content: extract re-reads what changed, refuses (naming the file) what
became unreadable, removes a channel whose source no longer provides it; verify reports every
source changed since extraction. On a copy of the tiny demo corpus, one session."""

from __future__ import annotations

import shutil

import av
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.storage.store import Store

pytestmark = pytest.mark.slow

SESSION = "Subject_1_Story_1"


@pytest.fixture
def corpus(tiny_demo, tmp_path):
    """One session of the tiny demo (video, self-ratings, transcript) and a store extracted from it."""
    data = tmp_path / "data"
    for folder in ("Videos", "Annotations", "Transcripts"):
        (data / folder).mkdir(parents=True)
        for p in (tiny_demo[0] / folder).iterdir():
            if SESSION.lower() in p.name.lower():
                shutil.copy(p, data / folder / p.name)
    store = tmp_path / "store"
    assert extract(data, store, "egemaps", "speech") == 0
    return data, store


def extract(data, store, *channels):
    return main(["extract", str(data), "--store", str(store), "--channels", *channels])


def strip_audio(video):
    """Re-mux ``video`` without its audio track (the video stream's packets copied as they are)."""
    tmp = video.with_name("noaudio.mp4")
    with av.open(str(video)) as src, av.open(str(tmp), "w") as dst:
        out = dst.add_stream_from_template(src.streams.video[0])
        for packet in src.demux(src.streams.video[0]):
            if packet.dts is not None:
                packet.stream = out
                dst.mux(packet)
    tmp.replace(video)


@pytest.mark.parametrize("damage", ["utf-16", "emptied", "deleted"])
def test_labels_that_became_unreadable_or_vanished_are_refused_naming_the_file(
    corpus, damage, capsys
):
    data, store = corpus
    ann = data / "Annotations" / f"{SESSION}.csv"
    before = Store(store).labels(SESSION, "valence_self").to_numpy()
    if damage == "utf-16":
        ann.write_text(ann.read_text(), encoding="utf-16")
    elif damage == "emptied":
        ann.write_text("")
    else:
        ann.unlink()
    capsys.readouterr()
    assert extract(data, store, "egemaps", "speech") == 1
    err = capsys.readouterr().err
    assert (
        f"FAILED {SESSION}" in err
        and f"labels 'valence_self' in the shard were read from {ann}" in err
    )
    assert ("which is gone" if damage == "deleted" else "which can no longer be read") in err
    # the shard is as it was: nothing half-updated
    np.testing.assert_array_equal(Store(store).labels(SESSION, "valence_self").to_numpy(), before)


def test_changed_labels_are_reported_by_verify_then_reread_by_extract(corpus, capsys):
    data, store = corpus
    ann = data / "Annotations" / f"{SESSION}.csv"
    rows = ann.read_text().splitlines()
    rows[5] = "0.9"
    ann.write_text("\n".join(rows) + "\n")
    capsys.readouterr()
    assert main(["verify", "--store", str(store)]) == 1
    err = capsys.readouterr().err
    assert f"labels valence_self: source {ann} changed since extraction" in err
    assert extract(data, store, "egemaps", "speech") == 0
    assert "labels/valence_self" in capsys.readouterr().out
    assert Store(store).labels(SESSION, "valence_self").iloc[4] == pytest.approx(0.9)
    assert main(["verify", "--store", str(store)]) == 0


def test_a_video_that_lost_its_audio_loses_its_egemaps(corpus, capsys):
    data, store = corpus
    assert {"scene/egemaps", "speaker/egemaps", "listener/egemaps"} <= set(
        Store(store).channel_keys(SESSION)
    )
    strip_audio(data / "Videos" / f"{SESSION}.mp4")
    capsys.readouterr()
    assert main(["verify", "--store", str(store)]) == 1  # the video changed since extraction
    assert "scene/egemaps: source" in capsys.readouterr().err
    # the config still asks for egemaps, which the video no longer provides: extract fails the
    # session with a summary, and the stale channels are gone all the same
    assert extract(data, store, "egemaps", "speech") == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "lacks 1 channel(s) the config needs" in captured.err + out
    assert "scene/egemaps removed from the shard: its source" in out
    assert "speaker/egemaps removed from the shard: it was derived" in out
    keys = Store(store).channel_keys(SESSION)
    assert not [k for k in keys if k.endswith("/egemaps")] and "speaker/speech" in keys
    assert main(["verify", "--store", str(store)]) == 0


def test_a_deleted_transcript_takes_its_channels_along(corpus, capsys):
    data, store = corpus
    (transcript,) = (data / "Transcripts").iterdir()
    transcript.unlink()
    capsys.readouterr()
    assert extract(data, store, "egemaps", "speech") == 0
    assert "speaker/speech removed from the shard" in capsys.readouterr().out
    keys = Store(store).channel_keys(SESSION)
    assert "speaker/speech" not in keys and "scene/egemaps" in keys
    assert main(["verify", "--store", str(store)]) == 0
