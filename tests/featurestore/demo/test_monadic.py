"""The monadic demo: its planted raters and session rating, and the corpus through
`featurestore demo --layout monadic`, `scan --manifest` and `extract`."""

from __future__ import annotations

import csv
import json

import h5py
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.demo.monadic import RATERS, TARGETS, manifest_columns, plan_monadic
from featurestore.storage.store import Store


def _lag_s(truth: np.ndarray, rating: np.ndarray, fps: float, max_lag: int = 100) -> float:
    """The lag (s) at which ``rating`` correlates best with ``truth`` (both per frame)."""
    corr = [np.corrcoef(truth[: len(truth) - d], rating[d:])[0, 1] for d in range(max_lag)]
    return int(np.argmax(corr)) / fps


@pytest.mark.parametrize("target", TARGETS)
def test_each_rater_follows_the_truth_with_their_own_lag(target):
    plan = plan_monadic(1, 2, duration_s=40.0, seed=3)
    frames = np.arange(plan.n_frames) / plan.fps
    lags = {}
    for rater, (times, values) in plan.ratings[target].items():
        on_frames = np.interp(frames, times, values)  # r2 rates at 10 Hz
        lags[rater] = _lag_s(plan.truth[target], on_frames, plan.fps)
        assert lags[rater] == pytest.approx(RATERS[rater]["lag_s"], abs=0.25), (rater, lags)
    assert lags["r2"] > lags["r1"] + 1.0


def test_plans_are_deterministic_and_the_session_rating_follows_the_arousal():
    a, b = plan_monadic(2, 1, duration_s=6.0, seed=0), plan_monadic(2, 1, duration_s=6.0, seed=0)
    assert np.array_equal(a.audio, b.audio) and a.session_rating == b.session_rating
    assert np.array_equal(a.ratings["valence"]["r2"][1], b.ratings["valence"]["r2"][1])
    assert not np.array_equal(a.audio, plan_monadic(2, 1, duration_s=6.0, seed=1).audio)
    plans = [plan_monadic(p, k, duration_s=6.0) for p in (1, 2) for k in (1, 2, 3)]
    ratings = np.array([p.session_rating for p in plans])
    assert ((ratings >= 1) & (ratings <= 7)).all() and ratings.std() > 0.5
    # the planted engagement: a more aroused session is rated higher
    assert np.corrcoef([p.arousal.mean() for p in plans], ratings)[0, 1] > 0.7
    # the face shows the smile: its smile state rises with the latent smile
    assert np.corrcoef(a.smile, a.states["smile"])[0, 1] > 0.9


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("monadic")
    args = ["demo", "--layout", "monadic", "--out", str(out), "--persons", "2"]
    assert main([*args, "--tasks", "1", "3", "4", "--duration", "6", "--seed", "1"]) == 0
    return out


@pytest.mark.slow
def test_the_corpus_has_a_manifest_of_per_person_media_and_rater_files(corpus):
    rows = list(csv.DictReader(open(corpus / "manifest.csv", newline="")))
    assert list(rows[0]) == manifest_columns()
    assert [(r["session"], r["person"], r["group"], r["split"]) for r in rows] == [
        ("p1_picture", "p1", "picture", "train"),
        ("p1_plan", "p1", "plan", "val"),
        ("p1_opinion", "p1", "opinion", "test"),
        ("p2_picture", "p2", "picture", "train"),
        ("p2_plan", "p2", "plan", "val"),
        ("p2_opinion", "p2", "opinion", "test"),
    ]
    for r in rows:
        for col in manifest_columns()[4:-1]:
            assert (corpus / r[col]).is_file(), col
        assert 1.0 <= float(r["rating_engagement"]) <= 7.0
    r1 = (corpus / rows[0]["label_arousal@r1"]).read_text().splitlines()
    r2 = (corpus / rows[0]["label_arousal@r2"]).read_text().splitlines()
    assert r1[0] == "arousal" and len(r1) == 1 + 150  # one value per 25 fps frame
    assert r2[0] == "time,arousal" and len(r2) == 1 + 60  # 10 Hz
    truth = json.loads((corpus / "demo_truth.json").read_text())
    assert truth["raters"]["r2"]["lag_s"] == 2.5 and set(truth["persons"]) == {"p1", "p2"}


@pytest.mark.slow
def test_scan_and_extract_with_the_manifest_write_monadic_shards(corpus, tmp_path):
    store = tmp_path / "store"
    manifest = str(corpus / "manifest.csv")
    assert main(["scan", "--manifest", manifest, "--store", str(store)]) == 0
    assert main(["extract", "--store", str(store), "--channels", "face_geom", "egemaps"]) == 0
    st = Store(store)
    assert st.list_sessions() == sorted(
        f"p{p}_{k}" for p in (1, 2) for k in ("picture", "plan", "opinion")
    )
    for s in st.list_sessions():
        meta = st.meta(s)
        assert (meta.layout, meta.partner, meta.speaker) == ("manifest", "", 0)
        assert meta.role_names == {"listener": "person", "speaker": "partner", "scene": "scene"}
        # the person's own camera and microphone; no partner, no shared scene
        assert sorted(st.channel_keys(s)) == ["listener/egemaps", "listener/face_geom"]
        assert st.read_channel(s, "listener/egemaps").source["path"].endswith(f"{s}.wav")
        assert st.read_channel(s, "listener/face_geom").valid.mean() > 0.9
    with h5py.File(st.shard_path("p1_plan")) as f:
        assert json.loads(f.attrs["role_names"])["listener"] == "person"
    assert main(["verify", "--store", str(store)]) == 0


def test_a_bad_demo_argument_is_a_usage_error(tmp_path, capsys):
    code = main(["demo", "--layout", "monadic", "--out", str(tmp_path), "--tasks", "9"])
    assert code == 2 and "tasks must be some of [1, 2, 3, 4]" in capsys.readouterr().err
