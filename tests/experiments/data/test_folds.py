"""Cross-validation protocols beside the fixed splits: leave one person out, k folds of persons
or of groups, and splits taken from the shards (a manifest's split column)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments.config import ConfigError
from experiments.config.tracks import selection_metric
from experiments.data.dataset import load_sessions
from experiments.evaluation.evaluate import evaluate_trial, split_sessions, window_sessions
from tests.experiments.helpers import (
    CHANNELS,
    LISTENERS,
    SPLIT_OF,
    SPLITS,
    config_dict,
    from_dict,
    pick,
    trials_for,
)

GLOBAL = {
    "personalization": ["global"],
    "postprocess": {"smooth_s": [0], "smooth_method": ["moving_average"], "rescale": ["none"]},
}


def run(trial, tables):
    return evaluate_trial(trial, window_sessions(tables, trial.window_key()))


def poison(tables, which):
    """``tables`` with random labels on the sessions ``which(table)`` picks."""
    rng = np.random.default_rng(7)
    return [
        dataclasses.replace(t, y=rng.uniform(-1, 1, t.n_frames).astype(np.float32))
        if which(t)
        else t
        for t in tables
    ]


def test_leave_one_person_out_predicts_each_person_without_their_labels(tables):
    trial = pick(trials_for(protocol="lopo", **GLOBAL), "listener")
    assert selection_metric(trial.track, trial.protocol) == "cv.ccc_generalized"
    clean = run(trial, tables)
    pool = sorted(SPLITS["train"] + SPLITS["val"])
    scored = clean.scores[clean.scores.split == "cv"]
    assert sorted(scored.story.unique()) == pool
    assert len(scored) == len(LISTENERS) * len(pool)  # each train + val session once
    assert clean.metrics["cv.ccc_generalized"] > 0.5
    assert "val.ccc_generalized" not in clean.metrics
    # listener 1's labels replaced: the predictions of listener 1 do not move (fitted without them),
    # the others' do (listener 1 is in their training folds)
    poisoned = run(trial, poison(tables, lambda t: t.listener == 1 and t.story in pool))
    ids = {t.session: (t.listener, t.story) for t in tables}
    for sid, pred in clean.predictions.items():
        listener, story = ids[sid]
        if story not in pool:
            continue
        if listener == 1:
            np.testing.assert_array_equal(pred, poisoned.predictions[sid], err_msg=sid)
        else:
            assert not np.array_equal(pred, poisoned.predictions[sid]), sid


def test_kfold_by_group_holds_whole_groups_out(tables):
    trial = pick(trials_for(protocol="kfold_group", folds=2, **GLOBAL), "listener")
    assert trial.folds == 2 and trial.params()["folds"] == "2"
    clean = run(trial, tables)
    # stories 1, 2, 4 dealt to 2 folds: {1, 4} and {2}; story 2 is predicted without itself
    poisoned = run(trial, poison(tables, lambda t: t.story == 2))
    story_of = {t.session: t.story for t in tables}
    assert sorted(clean.scores[clean.scores.split == "cv"].story.unique()) == [1, 2, 4]
    for sid, pred in clean.predictions.items():
        if story_of[sid] == 2:
            np.testing.assert_array_equal(pred, poisoned.predictions[sid], err_msg=sid)
        elif story_of[sid] in (1, 4):
            assert not np.array_equal(pred, poisoned.predictions[sid]), sid


def test_kfold_by_person_and_the_fixed_protocols_folds():
    kfold = pick(trials_for(protocol="kfold_person", folds=3, **GLOBAL), "listener")
    assert (kfold.protocol, kfold.folds) == ("kfold_person", 3)
    val = pick(trials_for(**GLOBAL), "listener")
    assert val.folds == 0 and val.params()["folds"] == "0"


def test_splits_from_the_shards(tables, planted_store):
    cfg = from_dict(config_dict("unused", splits="shard"))
    assert cfg.splits == {} and cfg.to_dict()["splits"] == "shard"
    assert from_dict(config_dict("unused", **{"splits": cfg.to_dict()["splits"]})).splits == {}
    # `splits: shard` loads every session with the split its shard records
    stored = load_sessions(planted_store, CHANNELS, splits=cfg.splits)
    assert len(stored) == len(tables)
    assert {(t.session, t.split) for t in stored} == {
        (t.session, SPLIT_OF[t.story]) for t in tables
    }
    trial = pick(trials_for(splits="shard", **GLOBAL), "listener")
    w = window_sessions(tables, trial.window_key())
    parts = split_sessions(w, dict(trial.splits))
    # the tables carry the split each session was stored with
    assert {name: sorted({s.story for s in ss}) for name, ss in parts.items()} == {
        "train": SPLITS["train"],
        "val": SPLITS["val"],
        "test": SPLITS["test"],
    }


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"protocol": "lopo"},
            "personalization: per_listener use(s) who is listening, but "
            "protocol lopo holds each person out of training; use personalization: ['global']",
        ),
        ({"protocol": "val", "folds": 3}, "folds applies to protocol kfold_person or kfold_group"),
        ({"protocol": "kfold_group", "folds": 1}, "expected a number of folds (an integer >= 2)"),
        ({"splits": "shrad"}, "expected a mapping of split -> stories, or shard"),
    ],
)
def test_bad_fold_settings_are_refused_with_the_key(changes, message):
    with pytest.raises(ConfigError) as e:
        from_dict(config_dict("unused", **changes))
    assert message in str(e.value)


def test_a_store_of_manifest_sessions_is_cross_validated_by_person(planted_store, tmp_path):
    """Sessions named by a manifest (no Subject_<L>_Story_<S>), their split recorded in the
    shard: loaded with `splits: shard` and scored under leave-one-person-out."""
    from featurestore.storage.store import SessionMeta, Store

    src, dst = Store(planted_store), Store(tmp_path / "store", mode="a")
    for s in src.list_sessions():
        m = src.meta(s)
        name = f"p{m.listener}-task{m.story}"
        dst.write_session(
            SessionMeta(
                name,
                m.listener,
                m.story,
                m.speaker,
                SPLIT_OF[m.story],
                m.n_frames,
                layout="manifest",
                person=f"p{m.listener}",
                group=f"task{m.story}",
            ),
            channels={k: src.read_channel(s, k) for k in CHANNELS},
            labels={"valence_self": src.labels(s).to_numpy()},
        )
    assert dst.list_sessions()[0] == "p1-task1" and dst.meta("p1-task1").person == "p1"
    tables = load_sessions(dst, CHANNELS, splits={})
    assert len(tables) == len(src.list_sessions())
    trial = pick(trials_for(protocol="lopo", splits="shard", **GLOBAL), "listener")
    res = evaluate_trial(trial, window_sessions(tables, trial.window_key()))
    assert sorted(res.scores[res.scores.split == "cv"].session)[:2] == ["p1-task1", "p1-task2"]
    assert res.metrics["cv.ccc_generalized"] > 0.5 and "test.ccc_generalized" in res.metrics
