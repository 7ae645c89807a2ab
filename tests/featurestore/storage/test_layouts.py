"""A corpus layout is one object: a third one, registered from this module alone, is stored,
read back, shown in its own words and checked like the built-in ones."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.extraction.recordings import Recordings
from featurestore.features import Features
from featurestore.storage import layouts
from featurestore.storage.layouts import (
    MANIFEST,
    OMG,
    CorpusLayout,
    CorpusWords,
    common_layout,
    layout_of,
    register_layout,
    table_layout,
)
from featurestore.storage.roles import corpus_key, store_key
from featurestore.storage.store import Channel, SessionMeta, Store


class VisitLayout(CorpusLayout):
    """A toy corpus: a child rated during a visit with a parent, ids as a list writes them."""

    name = "visits"
    words = CorpusWords(listener="child", speaker="parent", group="visit")


@pytest.fixture
def visits(monkeypatch):
    """The toy layout, registered for one test only."""
    monkeypatch.setattr(layouts, "_LAYOUTS", dict(layouts._LAYOUTS))
    return register_layout(VisitLayout())


def _channel() -> Channel:
    feats = Features(np.zeros((4, 2), np.float32), np.arange(4) * 0.1, np.ones(4, bool), ["a", "b"])
    return Channel.from_features(feats, extractor="egemaps", extractor_version="1")


def test_a_layout_registered_from_outside_is_stored_and_shown_in_its_words(
    tmp_path, capsys, visits
):
    assert layout_of("visits") is visits and store_key("child/egemaps") == "listener/egemaps"
    store = Store(tmp_path / "store", mode="a")
    meta = SessionMeta(
        "kid1_home", 1, 1, 0, "train", 10, layout="visits", person="kid1", group="home"
    )
    store.write_session(meta, channels={"listener/egemaps": _channel()})
    with h5py.File(store.shard_path("kid1_home")) as f:
        assert f.attrs["layout"] == "visits"
        assert json.loads(f.attrs["role_names"]) == {
            "listener": "child",
            "speaker": "parent",
            "scene": "scene",
        }
    read = store.meta("kid1_home")
    assert read.corpus_layout is visits
    assert corpus_key("listener/egemaps", read.role_names) == "child/egemaps"
    assert main(["ls", "--store", str(store.root)]) == 0
    head, row = capsys.readouterr().out.splitlines()
    assert head.split()[:4] == ["session", "child", "visit", "split"]
    assert row.split()[:3] == ["kid1_home", "kid1", "home"] and "child/egemaps" in row
    assert main(["inspect", "kid1_home", "--store", str(store.root)]) == 0
    assert capsys.readouterr().out.startswith(
        "kid1_home: child kid1, visit home, no parent, split train"
    )
    # reports: its note and prose; a store of its recordings refuses an OMG-Empathy name
    assert visits.note(monadic=True).startswith(
        "Corpus layout `visits`: the rated person is the `child`"
    )
    assert visits.in_words("per listener and story") == "per child and visit"
    assert Recordings.of(store).listed


def test_mixed_layouts_keep_the_stores_words_and_tables_show_written_ids(visits):
    assert common_layout(["omg", "omg"]) is OMG and common_layout(["manifest"]) is MANIFEST
    assert common_layout(["omg", "visits"]) is OMG and common_layout([]) is OMG
    assert table_layout(["omg", "manifest"]) is MANIFEST and table_layout(["omg"]) is OMG
    assert OMG.ids({"listener": 3, "story": 2, "speaker": 0}) == {
        "person": 3,
        "group": 2,
        "partner": "-",
    }


def test_a_listed_layout_refuses_a_config_declaration_that_contradicts_its_own():
    class Declared:
        scales = {"valence": [0.0, 10.0]}
        min_coverage = 0.5

    OMG.check_declarations(Declared(), {"valence": [-1.0, 1.0]}, 0.9, "fs.yaml")  # replaced
    with pytest.raises(
        ValueError, match=r"fs.yaml: targets.valence.scale \[-1.0, 1.0\] contradicts"
    ):
        MANIFEST.check_declarations(Declared(), {"valence": [-1.0, 1.0]}, None, "fs.yaml")
    with pytest.raises(ValueError, match="min_coverage 0.9 contradicts the manifest's 0.5"):
        MANIFEST.check_declarations(Declared(), {}, 0.9, "fs.yaml")
