"""Whole-session ratings in a shard: write, read back, replace, errors."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from featurestore.storage.session_labels import check_ratings, rating_value
from featurestore.storage.store import SessionMeta, Store, StoreError

META = SessionMeta("dyad1", 1, 2, 3, "train", n_frames=50, layout="manifest", person="anna")


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "store", mode="a")
    s.write_session(META, labels={"valence": np.zeros(50, np.float32)}, label_sources={})
    return s


def test_ratings_round_trip_with_raters_mean_and_source(store):
    store.write_session_labels(
        "dyad1",
        {"empathy": {"obs1": 3.0, "obs2": 5.0}, "liking": {"": 6.5}},
        {"kind": "table", "file": "r.csv"},
    )
    assert store.session_label_targets("dyad1") == ["empathy", "liking"]
    assert store.session_label("dyad1", "empathy") == 4.0
    assert store.session_raters("dyad1", "empathy") == {"obs1": 3.0, "obs2": 5.0}
    assert store.session_raters("dyad1", "liking") == {}
    assert store.session_ratings("dyad1") == {
        "empathy": {"obs1": 3.0, "obs2": 5.0},
        "liking": {"": 6.5},
    }
    with h5py.File(store.shard_path("dyad1"), "r") as f:
        ds = f["session_labels/empathy"]
        assert ds.shape == () and ds.dtype == np.float64
        assert json.loads(ds.attrs["raters"]) == ["obs1", "obs2"]
        assert json.loads(ds.attrs["source"]) == {"file": "r.csv", "kind": "table"}
        assert f["session_raters/empathy/obs2"][()] == 5.0
        assert f["labels/valence"].shape == (50,)  # the frame labels are untouched
    table = store.session_labels("empathy")
    assert table[["session", "listener", "value", "n_raters"]].values.tolist() == [
        ["dyad1", 1, 4.0, 2]
    ]
    # the new groups are no problem for verify; the shard has no channel (built for this test)
    assert [p.what for p in store.verify()] == ["no media: the shard holds no feature channel"]


def test_replacing_one_target_keeps_the_others_and_drops_old_raters(store):
    store.write_session_labels("dyad1", {"empathy": {"a": 1.0, "b": 2.0}, "liking": {"": 2.0}}, {})
    store.write_session_labels("dyad1", {"empathy": {"": 7.0}}, {})
    assert store.session_ratings("dyad1") == {"empathy": {"": 7.0}, "liking": {"": 2.0}}
    with h5py.File(store.shard_path("dyad1"), "r") as f:
        assert "session_raters" not in f


def test_a_missing_rating_names_the_session_and_how_to_add_it(store):
    store.write_session_labels("dyad1", {"liking": {"": 1.0}}, {})
    with pytest.raises(
        StoreError,
        match=r"dyad1 has no whole-session rating 'empathy' .*\(it has: liking\).*rating_empathy",
    ):
        store.session_label("dyad1", "empathy")
    with pytest.raises(StoreError, match="no shard for nobody"):
        store.write_session_labels("nobody", {"empathy": {"": 1.0}}, {})


@pytest.mark.parametrize(
    ("ratings", "message"),
    [
        ({"a/b": {"": 1.0}}, "without '/'"),
        ({"empathy": {"": float("nan")}}, "not a finite number"),
        ({"empathy": {"": 1.0, "r1": 2.0}}, "both without a rater and per rater"),
        ({"empathy": {"x/y": 1.0}}, "must not hold '/'"),
    ],
)
def test_bad_ratings_are_refused_and_leave_the_shard_unchanged(store, ratings, message):
    before = store.shard_path("dyad1").read_bytes()
    with pytest.raises(ValueError, match=message):
        store.write_session_labels("dyad1", ratings, {})
    assert store.shard_path("dyad1").read_bytes() == before
    with pytest.raises(ValueError, match=message):
        check_ratings(ratings)


def test_read_only_store_refuses_to_write(store):
    with pytest.raises(StoreError, match="read-only"):
        Store(store.root).write_session_labels("dyad1", {"e": {"": 1.0}}, {})


def test_rating_value_is_the_mean_over_raters():
    assert rating_value({"a": 1.0, "b": 2.0, "c": 6.0}) == 3.0


def test_verify_reports_a_session_label_that_is_not_one_finite_number(store):
    store.write_session_labels("dyad1", {"empathy": {"": 3.0}}, {})
    with h5py.File(store.shard_path("dyad1"), "a") as f:  # damage it behind the store's back
        del f["session_labels/empathy"]
        f["session_labels"].create_dataset("empathy", data=np.array([1.0, np.nan]))
    problems = store.verify()  # written by hand: no checksum, and not one number
    assert any("dataset session_labels/empathy has no checksum" in str(p) for p in problems)
    (problem,) = [p for p in problems if "not one finite number" in p.what]
    assert "session_labels/empathy: not one finite number" in str(problem)
    assert "featurestore ratings FILE" in str(problem)


def test_inspect_shows_the_ratings_and_their_raters(store, capsys):
    from featurestore.cli import main

    store.write_session_labels(
        "dyad1", {"empathy": {"o1": 3.0, "o2": 4.0}, "liking": {"": 2.0}}, {}
    )
    assert main(["inspect", "dyad1", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert "  session_labels/empathy: 3.5 (mean of o1 3, o2 4)\n" in out
    assert "  session_labels/liking: 2\n" in out
