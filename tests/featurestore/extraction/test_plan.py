"""One session's extraction plan (:mod:`featurestore.extraction.plan`): each channel's extractor,
cache key and source, whether it is current, dispatch on the extractor's declared kind."""

from __future__ import annotations

import pytest

from featurestore.demo import build_demo
from featurestore.extraction.config import FeatureConfig
from featurestore.extraction.extract import extract_session
from featurestore.extraction.plan import SessionError, plan_session
from featurestore.extractors import base
from featurestore.sources.manifest import scan
from featurestore.storage.provenance import cache_key, file_fingerprint
from featurestore.storage.store import Store

pytestmark = pytest.mark.slow

CHANNELS = ["face_geom", "egemaps", "speech"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    build_demo(out, n_listeners=1, stories=(1,), duration_s=4, progress=False)
    (sf,) = scan(out).sessions
    assert sf.transcript is not None
    return sf


def test_plan_gives_each_channel_its_extractor_key_and_source(session, tmp_path):
    cfg = FeatureConfig()
    store = Store(tmp_path / "store", mode="a")
    plan = plan_session(session, store=store, channels=CHANNELS, cfg=cfg, force=False)
    assert list(plan.channels) == [
        "speaker/face_geom",
        "listener/face_geom",
        "scene/egemaps",
        "speaker/speech",
        "listener/speech",
    ]
    video = file_fingerprint(session.video)
    transcript = file_fingerprint(session.transcript)
    kinds = {k: c.kind for k, c in plan.channels.items()}
    assert kinds == {
        "speaker/face_geom": "video",
        "listener/face_geom": "video",
        "scene/egemaps": "audio",
        "speaker/speech": "transcript",
        "listener/speech": "transcript",
    }
    face = plan.channels["listener/face_geom"]
    assert face.role == "listener" and face.source == video
    assert face.params["crop_x"] == list(plan.regions["listener"])
    assert face.cache_key == cache_key(video, "face_geom", face.extractor.version, face.params)
    assert plan.channels["speaker/speech"].source == transcript
    assert plan.meta.n_frames == 100 and plan.notes == []  # 4 s at the label rate
    assert plan.current_keys() == [] and [c.key for c in plan.todo("audio")] == ["scene/egemaps"]


def test_extracted_channels_are_current_unless_forced(session, tmp_path):
    cfg = FeatureConfig()
    res = extract_session(session, tmp_path / "store", CHANNELS, cfg, progress=False)
    assert res.status == "ok", res.error
    store = Store(tmp_path / "store", mode="a")
    again = plan_session(session, store=store, channels=CHANNELS, cfg=cfg, force=False)
    assert again.current_keys() == sorted(again.channels)
    assert all(again.todo(kind) == [] for kind in ("video", "audio", "transcript"))
    forced = plan_session(session, store=store, channels=CHANNELS, cfg=cfg, force=True)
    assert forced.current_keys() == [] and len(forced.todo("video")) == 2
    assert [c.cache_key for c in forced.channels.values()] == [
        c.cache_key for c in again.channels.values()
    ]
    rerun = extract_session(session, tmp_path / "store", CHANNELS, cfg, progress=False)
    assert rerun.status == "skipped" and rerun.computed == []
    assert rerun.current == [*sorted(again.channels), "speaker/egemaps", "listener/egemaps"]


def test_an_extractor_of_no_declared_kind_is_refused(session, tmp_path, monkeypatch):
    class Kindless(base.Extractor):
        name = "kindless"
        version = "1"
        config_class = base.ExtractorConfig

    monkeypatch.setitem(base._REGISTRY, "kindless", Kindless)
    store = Store(tmp_path / "store", mode="a")
    with pytest.raises(
        SessionError, match="'kindless' is neither a frame, an audio nor a transcript"
    ):
        plan_session(session, store=store, channels=["kindless"], cfg=FeatureConfig(), force=False)
    res = extract_session(
        session, tmp_path / "store", ["kindless"], FeatureConfig(), progress=False
    )
    assert res.failed and "kindless" in res.error


def test_rater_and_timed_label_files_are_read_by_key(tmp_path):
    """Per-rater keys keep their ``target@rater`` name; a ``time,<value>`` file waits to be
    resampled once the frame count is known, a per-frame one defines it."""
    from featurestore.extraction.plan import _read_labels
    from featurestore.sources.annotations import TimedRating
    from featurestore.sources.manifest import SessionFiles

    (tmp_path / "a.csv").write_text("valence\n" + "0.1\n" * 50)
    (tmp_path / "b.csv").write_text("time,valence\n0,0.0\n1.96,0.5\n")
    sf = SessionFiles(
        "s1",
        1,
        1,
        0,
        "train",
        annotations={"valence@a": tmp_path / "a.csv", "valence@b": tmp_path / "b.csv"},
    )
    labels, timed, sources = _read_labels(sf, FeatureConfig())
    assert list(labels) == ["valence@a"] and len(labels["valence@a"]) == 50
    assert isinstance(timed["valence@b"], TimedRating)
    assert timed["valence@b"].on_frames(50, 25.0)[49] == pytest.approx(0.5)
    assert set(sources) == {"valence@a", "valence@b"}
