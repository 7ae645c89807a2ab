"""The role vocabulary: the store's roles in each layout's words, and back."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from featurestore.storage.layouts import layout_of, layouts
from featurestore.storage.roles import corpus_key, role_words, store_key, store_role
from featurestore.storage.shard import SessionMeta
from featurestore.storage.store import Store


@pytest.mark.parametrize("layout", sorted(la.name for la in layouts()))
def test_every_layout_word_maps_back_to_its_store_role(layout):
    names = layout_of(layout).role_names
    for role, word in names.items():
        assert store_role(word) == role
        assert store_key(corpus_key(f"{role}/egemaps", names)) == f"{role}/egemaps"


def test_manifest_words_and_unknown_roles():
    assert store_key("partner/face_geom") == "speaker/face_geom"
    assert store_key("person/egemaps") == "listener/egemaps"
    assert store_key("persn/egemaps") == "persn/egemaps"  # left for the validator to refuse
    assert store_role("persn") is None
    assert role_words()[:3] == ["speaker", "listener", "scene"]
    assert {"person", "partner"} <= set(role_words())
    assert layout_of("a layout of the future").role_names == layout_of("omg").role_names


def test_reports_keep_omg_words_and_put_a_manifest_corpus_in_its_own():
    text = "- CCC averaging: per session, then the mean per listener and per story; 3 speakers"
    omg, manifest = layout_of("omg"), layout_of("manifest")
    assert omg.in_words(text) == text and omg.note() == ""
    assert manifest.in_words(text) == (
        "- CCC averaging: per session, then the mean per person and per group; 3 partners"
    )
    # identifiers (config values, metric names) are not prose
    assert manifest.in_words("per_listener, test_unseen_listener") == (
        "per_listener, test_unseen_listener"
    )
    assert "`person` (stored as `listener`)" in manifest.note()
    assert "no partner" in manifest.note(monadic=True)


@pytest.mark.parametrize(
    ("layout", "words"),
    [
        ("omg", {"listener": "listener", "scene": "scene", "speaker": "speaker"}),
        ("manifest", {"listener": "person", "scene": "scene", "speaker": "partner"}),
    ],
)
def test_a_shard_records_its_layouts_role_names(tmp_path, layout, words):
    store = Store(tmp_path / "store", mode="a")
    meta = SessionMeta("s1", 1, 1, 0, "train", 10, layout=layout)
    store.write_session(meta, labels={"valence": np.zeros(10, np.float32)})
    with h5py.File(store.shard_path("s1")) as f:
        assert json.loads(f.attrs["role_names"]) == words
    assert store.meta("s1").role_names == words
    assert list(store.sessions().layout) == [layout]
