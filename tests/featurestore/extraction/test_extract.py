"""End to end on the demo corpus: extract, shapes, validity, provenance, cache, bad input, kill."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import h5py
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.extractors import get_extractor
from featurestore.storage.provenance import cache_key, file_fingerprint
from featurestore.storage.store import Store
from tests.featurestore.helpers import make_video

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(tiny_demo, tmp_path_factory):
    # a copy of the session's tiny demo corpus (2 listeners x stories 1-2 x 6 s): cheaper than building one
    out = tmp_path_factory.mktemp("demo") / "corpus"
    shutil.copytree(tiny_demo[0], out)
    # these tests cover the face rule for the per-role voice and the self-ratings alone;
    # test_transcripts.py and test_demo_text.py cover transcripts and observer ratings
    for folder in ("Transcripts", "Observer_Listener", "Observer_Speaker"):
        shutil.rmtree(out / folder)
    return out


@pytest.fixture(scope="module")
def extracted(corpus, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    assert main(["extract", str(corpus), "--store", str(store), "--jobs", "2"]) == 0
    return store


def test_extract_shapes_validity_provenance(extracted, corpus):
    st = Store(extracted)
    assert st.list_sessions() == [
        "Subject_1_Story_1",
        "Subject_1_Story_2",
        "Subject_2_Story_1",
        "Subject_2_Story_2",
    ]
    s = "Subject_1_Story_2"
    meta = st.meta(s)
    assert (meta.n_frames, meta.split, meta.speaker) == (150, "train", 1)
    assert sorted(st.channel_keys(s)) == [
        "listener/egemaps",
        "listener/face_geom",
        "scene/egemaps",
        "speaker/egemaps",
        "speaker/face_geom",
    ]
    for role in ("speaker", "listener"):
        face = st.read_channel(s, f"{role}/face_geom")
        assert face.data.shape == (30, 17)  # 6 s at 5 fps
        np.testing.assert_allclose(np.diff(face.time), 0.2)
        assert face.valid.mean() > 0.9, f"{role} face found in {face.valid.mean():.0%} of frames"
        assert "mouth_open" in face.columns and "head_yaw" in face.columns
        assert face.extractor == "face_geom" and face.params["face_fps"] == 5.0
        assert face.source["path"].endswith("Subject_1_Story_2.mp4") and len(face.cache_key) == 20
    scene = st.read_channel(s, "scene/egemaps")
    assert scene.data.shape[1] == 25 and abs(scene.data.shape[0] - 600) < 10
    np.testing.assert_allclose(np.diff(scene.time), 0.01, atol=1e-9)
    spk, lst = st.read_channel(s, "speaker/egemaps"), st.read_channel(s, "listener/egemaps")
    np.testing.assert_array_equal(spk.data, scene.data)
    assert (
        spk.valid.mean() > lst.valid.mean() > 0
    )  # the speaker talks most, the listener backchannels
    assert not np.any(spk.valid & ~scene.valid)
    # how far after its time stamps each channel read (docs/channels.md): a face row
    # its one frame, eGeMAPS 70 ms of audio and the resampler's 2 ms, the face rule's voice
    # rows the mouth activity's centred 0.6 s window and the next 5 fps sample
    assert st.read_channel(s, "listener/face_geom").lookahead_s == 0.0
    assert scene.lookahead_s == pytest.approx(0.07 + 16 / (0.97 * 8000))
    assert spk.lookahead_s == lst.lookahead_s == pytest.approx(0.3 + 0.2)
    y = st.labels(s, "valence_self")
    assert len(y) == 150 and np.all(np.abs(y) <= 1)
    face = st.read_channel(s, "listener/face_geom")
    with h5py.File(st.shard_path(s)) as f:
        a = f["listener/face_geom"].attrs
        assert json.loads(a["columns"]) == face.columns and json.loads(a["params"]) == face.params
        assert (a["extractor"], a["extractor_version"]) == (
            "face_geom",
            get_extractor("face_geom").version,
        )
        video = corpus / "Videos" / f"{s}.mp4"
        assert json.loads(a["source"]) == file_fingerprint(video)
        assert a["cache_key"] == cache_key(
            file_fingerprint(video), "face_geom", a["extractor_version"], face.params
        )
        assert datetime.fromisoformat(a["created_utc"]).utcoffset() == timedelta(0)
    assert main(["verify", "--store", str(extracted)]) == 0


def test_rerun_skips_and_changed_params_redo_only_what_changed(extracted, corpus, tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(extracted, store)
    before = {p.name: p.stat().st_mtime_ns for p in store.glob("*.h5")}
    assert main(["extract", str(corpus), "--store", str(store)]) == 0
    assert "0 extracted, 4 already current" in capsys.readouterr().out
    assert before == {p.name: p.stat().st_mtime_ns for p in store.glob("*.h5")}
    old = Store(store).cache_keys("Subject_1_Story_1")
    assert (
        main(
            [
                "extract",
                str(corpus),
                "--store",
                str(store),
                "--face-fps",
                "2.5",
                "--sessions",
                "Subject_1_Story_1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    new = Store(store).cache_keys("Subject_1_Story_1")
    assert new["scene/egemaps"] == old["scene/egemaps"]  # audio untouched
    assert new["listener/face_geom"] != old["listener/face_geom"]
    assert new["listener/egemaps"] != old["listener/egemaps"]  # derived from the new faces
    assert (
        "computed speaker/face_geom, listener/face_geom, speaker/egemaps, listener/egemaps" in out
    )
    assert Store(store).read_channel("Subject_1_Story_1", "listener/face_geom").data.shape[0] == 15
    assert (
        main(
            [
                "extract",
                str(corpus),
                "--store",
                str(store),
                "--force",
                "--sessions",
                "Subject_2_Story_2",
            ]
        )
        == 0
    )
    assert "computed speaker/face_geom" in capsys.readouterr().out


def test_an_extractor_setting_reaches_the_channel_and_redoes_only_that_channel(
    extracted, corpus, tmp_path, capsys
):
    store, s = tmp_path / "store", "Subject_1_Story_1"
    shutil.copytree(extracted, store)
    old = Store(store).cache_keys(s)
    before = Store(store).read_channel(s, "listener/face_geom")
    run = ["extract", str(corpus), "--store", str(store), "--sessions", s]
    assert main([*run, "--set", "face_geom.blink_threshold=1.0"]) == 0
    out = capsys.readouterr().out
    assert "extractor settings (not the defaults): face_geom.blink_threshold=1.0" in out
    assert (
        "computed speaker/face_geom, listener/face_geom, speaker/egemaps, listener/egemaps" in out
    )
    new = Store(store).cache_keys(s)
    assert (
        new["scene/egemaps"] == old["scene/egemaps"]
        and new["listener/face_geom"] != old["listener/face_geom"]
    )
    after = Store(store).read_channel(s, "listener/face_geom")
    assert after.params["blink_threshold"] == 1.0
    blink = after.columns.index("blink")
    assert np.all(after.data[after.valid, blink] == 1.0) and not np.all(
        before.data[before.valid, blink] == 1.0
    )
    others = [i for i in range(len(after.columns)) if i != blink]
    np.testing.assert_array_equal(
        after.data[:, others], before.data[:, others]
    )  # same landmarks, same numbers
    assert main(["inspect", s, "--store", str(store)]) == 0
    assert '"blink_threshold": 1.0' in capsys.readouterr().out
    # the same setting from a featurestore.yaml is the same channel: nothing to redo
    cfg = tmp_path / "featurestore.yaml"
    cfg.write_text("face_fps: 5\nextractors:\n  face_geom: {blink_threshold: 1}\n")
    assert main([*run, "--config", str(cfg)]) == 0
    assert "0 extracted, 1 already current" in capsys.readouterr().out
    # an audio setting redoes the audio channels only; the track is decoded at the new rate
    assert main([*run, "--config", str(cfg), "--set", "egemaps.sampling_rate=8000"]) == 0
    assert "computed scene/egemaps, speaker/egemaps, listener/egemaps" in capsys.readouterr().out
    final = Store(store).cache_keys(s)
    assert (
        final["listener/face_geom"] == new["listener/face_geom"]
        and final["scene/egemaps"] != new["scene/egemaps"]
    )
    scene = Store(store).read_channel(s, "scene/egemaps")
    assert scene.params["sampling_rate"] == 8000
    assert main(["verify", "--store", str(store)]) == 0


def _copy_corpus(corpus: Path, dst: Path) -> Path:
    shutil.copytree(corpus, dst)
    return dst


def test_bad_inputs_fail_their_session_only(corpus, tmp_path, capsys):
    data = _copy_corpus(corpus, tmp_path / "data")
    vids = data / "Videos"
    # corrupt video
    (vids / "Subject_1_Story_1.mp4").write_bytes(b"\x00" * 4096)
    # truncated video
    raw = (vids / "Subject_1_Story_2.mp4").read_bytes()
    (vids / "Subject_1_Story_2.mp4").write_bytes(raw[: len(raw) // 3])
    # labels 2 s longer than the video
    ann = data / "Annotations" / "Subject_2_Story_1.csv"
    rows = ann.read_text().splitlines()
    ann.write_text("\n".join(rows + rows[1:51]) + "\n")
    store = tmp_path / "store"
    assert main(["extract", str(data), "--store", str(store)]) == 1
    err = capsys.readouterr().err
    assert "FAILED Subject_1_Story_1" in err and "Subject_1_Story_1.mp4" in err and "corrupt" in err
    assert "FAILED Subject_1_Story_2" in err
    assert "FAILED Subject_2_Story_1" in err and "labels define the frame count" in err
    assert Store(store).list_sessions() == ["Subject_2_Story_2"]  # the good session went on
    assert main(["verify", "--store", str(store)]) == 0


def test_no_audio_no_face_and_duplicates(tmp_path, capsys):
    data = tmp_path / "data"
    (data / "Videos").mkdir(parents=True)
    make_video(
        data / "Videos" / "Subject_1_Story_2.mp4", n_frames=50, width=320, height=96, audio=False
    )
    store = tmp_path / "store"
    # the config needs egemaps and the video has no sound: the session fails, its labels stored
    assert main(["extract", str(data), "--store", str(store), "--channels", "egemaps"]) == 1
    err = capsys.readouterr().err
    assert "FAILED Subject_1_Story_2: Subject_1_Story_2 lacks 1 channel(s) the config needs" in err
    assert "scene/egemaps: no audio track in" in err and "column audio" in err
    assert main(["extract", str(data), "--store", str(store), "--channels", "face_geom"]) == 1
    assert "no face found in the speaker region (x 0-135)" in capsys.readouterr().err
    shutil.copy(data / "Videos" / "Subject_1_Story_2.mp4", data / "Subject_1_Story_2.avi")
    assert main(["extract", str(data), "--store", str(store), "--channels", "egemaps"]) == 1
    assert "several files for one session" in capsys.readouterr().err


@pytest.mark.integration
def test_kill_mid_extraction_leaves_no_partial_shard_and_resumes(corpus, tmp_path):
    data = _copy_corpus(corpus, tmp_path / "data")
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "featurestore.cli", "extract", str(data), "--store", str(store)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and not list(store.glob("*.h5")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = Store(store).list_sessions()
    assert 1 <= len(done) < 4, "the kill should land between the first and the last shard"
    for s in done:  # every shard present is complete and readable
        assert len(Store(store).channel_keys(s)) == 5
    assert main(["verify", "--store", str(store)]) == 0
    assert main(["extract", str(data), "--store", str(store)]) == 0
    assert len(Store(store).list_sessions()) == 4
    assert Store(store).temp_files() == []
    assert main(["verify", "--store", str(store)]) == 0


def test_verify_names_the_shards_missing_from_the_scanned_corpus(
    corpus, extracted, tmp_path, capsys
):
    store = tmp_path / "store"
    shutil.copytree(extracted, store)
    assert main(["verify", "--store", str(store)]) == 0  # no record of the corpus: it says so
    assert "records no corpus (manifest.json" in capsys.readouterr().out
    assert main(["scan", str(corpus), "--store", str(store)]) == 0
    assert main(["verify", "--store", str(store)]) == 0
    capsys.readouterr()
    for s in ("Subject_1_Story_2", "Subject_2_Story_1"):  # as a killed extract leaves it
        (store / f"{s}.h5").unlink()
    assert main(["verify", "--store", str(store)]) == 1
    err = capsys.readouterr().err
    for s in ("Subject_1_Story_2", "Subject_2_Story_1"):
        assert f"no shard {store / s}.h5, though {store / 'manifest.json'} lists the session" in err
    assert "verify: 2 problem(s)" in err
    assert main(["extract", "--store", str(store)]) == 0  # resumes from the recorded corpus
    assert main(["verify", "--store", str(store)]) == 0


def test_a_session_without_its_rating_file_is_extracted_predict_only(
    corpus, extracted, tmp_path, capsys
):
    data = _copy_corpus(corpus, tmp_path / "data")
    (data / "Annotations" / "Subject_2_Story_2.csv").unlink()  # a blind test's session
    store = tmp_path / "store"
    shutil.copytree(extracted, store)
    (store / "Subject_2_Story_2.h5").unlink()
    assert main(["scan", str(data), "--store", str(store)]) == 0
    out, err = capsys.readouterr()
    assert "1 session(s) without labels: predict only (Subject_2_Story_2)" in out
    assert "Subject_2_Story_2" not in err  # no issue
    assert main(["extract", "--store", str(store), "--sessions", "Subject_2_Story_2"]) == 0
    st = Store(store)
    assert st.label_targets("Subject_2_Story_2") == []
    assert st.channel_keys("Subject_2_Story_2") == st.channel_keys("Subject_1_Story_2")
    capsys.readouterr()
    assert main(["verify", "--store", str(store)]) == 0
    assert "predict only: 1 shard(s) without labels (Subject_2_Story_2)" in capsys.readouterr().out


def test_frame_jobs_get_their_role_crop_in_their_pixel_format(tmp_path):
    from featurestore.extraction.extract import FrameJob, run_frame_jobs
    from featurestore.extractors import get_extractor
    from featurestore.extractors.base import Track
    from featurestore.sources import media

    class Recorder(Track):
        def __init__(self):
            self.seen = []

        def add(self, time_s, image):
            self.seen.append((time_s, image.copy()))

        def result(self):
            raise NotImplementedError

    video = make_video(tmp_path / "v.mp4", n_frames=20, width=320, height=96)
    regions = {"speaker": (0, 120), "listener": (120, 320)}
    jobs = [FrameJob(Recorder(), "speaker", "gray"), FrameJob(Recorder(), "listener", "rgb24")]
    run_frame_jobs(video, jobs, regions, sample_fps=5)
    frames = list(media.iter_frames(video, 5, pixel_format=("gray", "rgb24")))
    assert [t for t, _ in jobs[0].track.seen] == [t for _, t, _ in frames] == [0.0, 0.2, 0.4, 0.6]
    for (_, gray), (_, rgb), (_, _, images) in zip(
        jobs[0].track.seen, jobs[1].track.seen, frames, strict=True
    ):
        np.testing.assert_array_equal(gray, images["gray"][:, :120])
        np.testing.assert_array_equal(rgb, images["rgb24"][:, 120:])
    assert (
        get_extractor("face_geom").pixel_format == "gray"
    )  # extraction hands face_geom the decoder's luma


def test_a_variable_rate_video_stores_its_faces_at_their_presentation_times(tmp_path, capsys):
    cv2 = pytest.importorskip("cv2")
    pytest.importorskip("dlib")
    from skimage import data as images

    head = cv2.resize(images.astronaut()[30:270, 110:350], None, fx=1.5, fy=1.5)
    frame = np.full((360, 960, 3), 90, np.uint8)
    frame[:, 20:380] = frame[:, 580:940] = head  # a face in each role's crop (x 0-405, 405-960)
    keep = {*range(20), *range(20, 50, 3)}  # 60 % of 2 s: every frame to 0.8 s, then a third
    corpus = tmp_path / "data"
    (corpus / "Videos").mkdir(parents=True)
    video = corpus / "Videos" / "Subject_1_Story_1.mp4"
    make_video(video, n_frames=50, width=960, height=360, image=frame, keep=keep, audio=False)
    (corpus / "Annotations").mkdir()
    (corpus / "Annotations" / "Subject_1_Story_1.csv").write_text("valence\n" + "0.1\n" * 50)
    store = tmp_path / "store"
    cmd = ["extract", str(corpus), "--store", str(store), "--channels", "face_geom"]
    assert main(cmd) == 0
    true = np.array(sorted(keep)) / 25
    slots = np.floor(true * 5 + 1e-9)  # face_fps 5: the first frame at or after each 0.2 s
    want = [true[slots == s][0] for s in np.unique(slots)]
    for role in ("speaker", "listener"):
        ch = Store(store).read_channel("Subject_1_Story_1", f"{role}/face_geom")
        np.testing.assert_allclose(ch.time, want, atol=1e-9)
        assert ch.valid.all() and ch.params["frame_times"] == "presentation"
    stamped = np.arange(len(true)) / (len(true) / 2.0)  # i / average rate, the stamps of before
    assert np.abs(stamped - true).max() > 0.5  # over two sampled frames off: this clip tells
    capsys.readouterr()
    assert main(cmd) == 0 and "0 extracted, 1 already current" in capsys.readouterr().out
    assert main(["verify", "--store", str(store)]) == 0


def test_a_session_whose_channels_fall_outside_it_is_refused_before_writing(tmp_path, capsys):
    """A 1-frame video with 3 s of sound and a 1-row label was extracted (exit 0) into a shard
    `verify` then rejected; extract applies verify's rule first."""
    import av

    from tests.featurestore.helpers import mux_audio

    data = tmp_path / "data"
    (data / "Videos").mkdir(parents=True)
    (data / "Annotations").mkdir()
    with av.open(str(data / "Videos" / "Subject_1_Story_1.mp4"), "w") as c:
        v = c.add_stream("libx264", rate=25)
        v.width, v.height, v.pix_fmt = 320, 96, "yuv420p"
        a = c.add_stream("aac", rate=16000)
        a.layout = "mono"
        img = np.random.default_rng(0).integers(0, 255, (96, 320, 3), dtype=np.uint8)
        for p in [*v.encode(av.VideoFrame.from_ndarray(img, format="rgb24")), *v.encode()]:
            c.mux(p)
        tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(3 * 16000) / 16000)
        mux_audio(c, a, tone.astype(np.float32), 16000)
    (data / "Annotations" / "Subject_1_Story_1.csv").write_text("valence\n0.5\n")
    store = tmp_path / "store"
    assert main(["extract", str(data), "--store", str(store), "--channels", "egemaps"]) == 1
    err = capsys.readouterr().err
    assert "FAILED Subject_1_Story_1: Subject_1_Story_1: scene/egemaps: times 0.00-3.0" in err
    assert "s outside the session (0-0.04 s), whose length its 1 frame(s) of labels set" in err
    assert "nothing written: cut the recording to the labels' length, or label all of it" in err
    assert Store(store).list_sessions() == []
    # the rule is verify's: the same channel written by hand is the problem verify reports
    from featurestore.storage.shard import Channel, SessionMeta

    t = np.arange(0, 3.0, 0.01)
    channel = Channel(np.zeros((len(t), 1), np.float32), t, np.ones(len(t), bool), ["c0"])
    meta = SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", 1)
    Store(store, mode="a").write_session(meta, channels={"scene/egemaps": channel})
    assert main(["verify", "--store", str(store)]) == 1
    out = capsys.readouterr()
    assert "scene/egemaps: times 0.00-2.99 s outside the session (0-0.04 s)" in out.out + out.err
