"""The two challenge tracks: which configuration is in which, tracks that nest, no identity leak in
the generalized track, selection on validation only, out-of-fold post-processing, fit sharing."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

from experiments.config.loading import from_dict
from experiments.config.options import (
    CHOSEN_UNSEEN_MARK,
    CHOSEN_UNSEEN_NOTE,
    IDENTITY_PERSONALIZATIONS,
    IDENTITY_RESCALES,
    PERSONALIZATIONS,
    RESCALES,
)
from experiments.config.tracks import candidates, track_of
from experiments.evaluation.evaluate import (
    evaluate_part,
    evaluate_trial,
    evaluate_trials,
    fit_groups,
    group_fit_parts,
    split_sessions,
    window_sessions,
)
from experiments.evaluation.fitting import FitPart, fit_group
from experiments.studies.sweep import SweepOptions, run_sweep
from experiments.tracking.summary import best_per_track, summary_markdown, track_summary
from tests.experiments.helpers import SPLITS, config_dict, pick, trials_for


@pytest.mark.parametrize(
    ("personalization", "rescale"), list(itertools.product(PERSONALIZATIONS, RESCALES))
)
def test_every_option_has_its_track(personalization, rescale):
    uses_identity = personalization in IDENTITY_PERSONALIZATIONS or rescale in IDENTITY_RESCALES
    assert track_of(personalization, rescale) == (
        "personalized" if uses_identity else "generalized"
    )
    # only global models with listener-agnostic post-processing are generalized
    assert (track_of(personalization, rescale) == "generalized") == (
        personalization == "global" and rescale in ("none", "train", "bias")
    )


def _relabel(w, mapping):
    """``w`` with every session's listener id replaced by ``mapping[session]``."""
    return dataclasses.replace(
        w, sessions=[dataclasses.replace(s, listener=mapping[s.session]) for s in w.sessions]
    )


@pytest.mark.parametrize("rescale", ["none", "train", "bias"])
def test_generalized_track_gives_the_same_predictions_when_listener_ids_are_shuffled(
    tables, rescale
):
    trials = trials_for(
        personalization=["global", "per_listener"],
        postprocess={"smooth_s": [2], "rescale": ["none", "train", "bias", "listener"]},
    )
    trial = pick(trials, "listener", smooth_s=2.0, rescale=rescale)
    assert trial.track == "generalized"
    w = window_sessions(tables, trial.window_key())
    rng = np.random.default_rng(7)
    shuffled = _relabel(
        w, {s.session: int(rng.integers(100, 200)) for s in w.sessions}
    )  # identity destroyed
    clean, other = evaluate_trial(trial, w), evaluate_trial(trial, shuffled)
    assert set(clean.predictions) == set(other.predictions)
    for sid in clean.predictions:
        np.testing.assert_array_equal(clean.predictions[sid], other.predictions[sid], err_msg=sid)

    # the check can fail: a personalized configuration's predictions do change
    for personalization, rescale_p in (("per_listener", "none"), ("global", "listener")):
        p_trial = pick(
            trials, "listener", personalization=personalization, smooth_s=2.0, rescale=rescale_p
        )
        assert p_trial.track == "personalized"
        a, b = evaluate_trial(p_trial, w), evaluate_trial(p_trial, shuffled)
        assert any(not np.array_equal(a.predictions[s], b.predictions[s]) for s in a.predictions), (
            personalization
        )


def test_unseen_listener_models_never_see_the_held_out_listener(tables):
    """Poison one listener's *training* labels: their unseen-listener predictions do not change,
    the other listeners' do (their models trained on the poison)."""
    trial = pick(
        trials_for(postprocess={"smooth_s": [0], "rescale": ["train"]}), "listener", rescale="train"
    )
    trial = dataclasses.replace(trial, unseen_listener=True)
    w = window_sessions(tables, trial.window_key())
    rng = np.random.default_rng(3)
    poisoned = dataclasses.replace(
        w,
        sessions=[
            dataclasses.replace(s, y=rng.uniform(-1, 1, len(s.y)).astype(np.float32))
            if s.listener == 1 and s.story in SPLITS["train"]
            else s
            for s in w.sessions
        ],
    )
    clean, bad = evaluate_trial(trial, w), evaluate_trial(trial, poisoned)
    # the test stories only: validation labels choose configurations, no val_unseen
    assert set(clean.unseen_predictions) == {
        s.session for s in w.sessions if s.story in SPLITS["test"]
    }
    for sid, pred in clean.unseen_predictions.items():
        same = np.array_equal(pred, bad.unseen_predictions[sid])
        assert same == sid.startswith("Subject_1_"), sid
    # the model that saw every listener did see the poison
    assert not np.array_equal(
        clean.predictions["Subject_1_Story_3"], bad.predictions["Subject_1_Story_3"]
    )


def test_post_processing_is_fitted_out_of_fold(tables):
    """Each training story's predictions used to fit rescaling come from a model that never saw
    that story's labels; the in-sample ones do not."""
    trial = pick(
        trials_for(postprocess={"smooth_s": [0], "rescale": ["train"]}), "listener", rescale="train"
    )
    w = window_sessions(tables, trial.window_key())
    parts = split_sessions(w, dict(trial.splits))
    story = SPLITS["train"][0]
    rng = np.random.default_rng(5)
    poisoned_train = [
        dataclasses.replace(s, y=rng.uniform(-1, 1, len(s.y)).astype(np.float32))
        if s.story == story
        else s
        for s in parts["train"]
    ]
    evaluate = parts["val"] + parts["test"]
    for fit_on, should_change in (("out_of_fold", False), ("in_sample", True)):
        t = dataclasses.replace(trial, fit_on=fit_on)
        clean = fit_group(t, parts["train"], evaluate, need_post_fit=True, need_unseen=False)
        bad = fit_group(t, poisoned_train, evaluate, need_post_fit=True, need_unseen=False)
        held = [s.session for s in parts["train"] if s.story == story]
        changed = [not np.array_equal(clean.fit_on[sid], bad.fit_on[sid]) for sid in held]
        assert all(changed) if should_change else not any(changed), fit_on
    # and the two ways of fitting give different final predictions
    oof = evaluate_trial(trial, w)
    ins = evaluate_trial(dataclasses.replace(trial, fit_on="in_sample"), w)
    assert any(not np.allclose(oof.predictions[s], ins.predictions[s]) for s in oof.predictions)


def test_a_fit_group_gives_what_each_configuration_gives_alone(tables):
    trials = trials_for(
        personalization=["global"],
        postprocess={"smooth_s": [0, 2], "rescale": ["none", "train", "listener"]},
    )
    group = [t for t in trials if t.feature_set == "listener" and t.model == "ridge"]
    assert len(fit_groups(group)) == 1 and len(group) == 6
    w = window_sessions(tables, group[0].window_key())
    together = evaluate_trials(group, w)
    for t, r in zip(group, together, strict=True):
        alone = evaluate_trial(t, w)
        assert r.trial == t and r.metrics == alone.metrics
        for sid in alone.predictions:
            np.testing.assert_array_equal(r.predictions[sid], alone.predictions[sid])
    with pytest.raises(ValueError, match="one fit key"):
        evaluate_trials([group[0], dataclasses.replace(group[0], model_params=(("alpha", 1),))], w)


@pytest.mark.parametrize(
    ("personalization", "fit_on", "unseen_listener"),
    [
        ("global", "out_of_fold", True),
        ("per_listener", "out_of_fold", False),
        ("global_calibrated", "out_of_fold", False),
        ("global", "in_sample", True),
    ],
)
def test_fit_parts_made_apart_give_what_the_group_gives(
    tables, personalization, fit_on, unseen_listener
):
    """The processes backend fits a slow model's parts (main, folds, unseen listeners) in different
    workers and combines them: every prediction, metric and warning must be what one process gives."""
    trials = trials_for(
        personalization=[personalization],
        postprocess={"smooth_s": [2], "rescale": ["none", "train", "listener"], "fit_on": fit_on},
    )
    # as the sweep's unseen-listener runs are made: the chosen configuration with the protocol on
    group = [
        dataclasses.replace(t, unseen_listener=unseen_listener)
        for t in trials
        if t.feature_set == "listener" and t.model == "ridge"
    ]
    assert len(fit_groups(group)) == 1 and len(group) == 3
    w = window_sessions(tables, group[0].window_key())
    parts = group_fit_parts(group, w)
    kinds = [p.kind for p in parts]
    n_train = len(SPLITS["train"])
    assert kinds.count("main") == 1 and kinds.count("fold") == (
        n_train if fit_on == "out_of_fold" else 0
    )
    with_unseen = unseen_listener and personalization == "global"
    assert ("unseen" in kinds) == with_unseen and ("unseen_fold" in kinds) == (
        with_unseen and fit_on == "out_of_fold"
    )
    whole = evaluate_trials(group, w)
    done = {p: evaluate_part(group, w, p) for p in reversed(parts)}  # any order, any process
    for given in (
        done,
        dict(list(done.items())[: len(done) // 2]),
    ):  # all parts given, or half (the rest fitted here)
        apart = evaluate_trials(group, w, given)
        for a, b in zip(whole, apart, strict=True):
            assert a.trial == b.trial and a.metrics == b.metrics and a.warnings == b.warnings
            assert a.n_train_rows == b.n_train_rows
            for mine, theirs in (
                (a.predictions, b.predictions),
                (a.unseen_predictions, b.unseen_predictions),
            ):
                assert mine.keys() == theirs.keys()
                for sid in mine:
                    np.testing.assert_array_equal(mine[sid], theirs[sid])
    if with_unseen:
        assert any(k.endswith("_unseen") for k in whole[0].scores.split)


def test_fit_parts_are_for_the_val_protocol_only(tables):
    group = [pick(trials_for(protocol="loso"), "listener")]
    w = window_sessions(tables, group[0].window_key())
    assert group_fit_parts(group, w) == []
    with pytest.raises(ValueError, match="protocol val only"):
        evaluate_part(group, w, FitPart("main"))
    with pytest.raises(ValueError, match="protocol val only"):
        evaluate_trials(
            group,
            w,
            {FitPart("main"): evaluate_part([pick(trials_for(), "listener")], w, FitPart("main"))},
        )


def test_best_per_track_reads_validation_only():
    rng = np.random.default_rng(0)
    n = 40
    table = pd.DataFrame(
        {
            "run_id": [f"r{i}" for i in range(n)],
            "status": "done",
            "label": "x",
            "track": rng.choice(["personalized", "generalized"], n),
            "val.ccc_personalized": rng.uniform(size=n),
            "val.ccc_generalized": rng.uniform(size=n),
            "test.ccc_personalized": rng.uniform(size=n),
            "test.ccc_generalized": rng.uniform(size=n),
        }
    )
    chosen = {k: v.run_id for k, v in best_per_track(table, "val").items()}
    scrambled = table.assign(
        **{c: rng.uniform(size=n) for c in ("test.ccc_personalized", "test.ccc_generalized")}
    )
    assert {k: v.run_id for k, v in best_per_track(scrambled, "val").items()} == chosen
    for track, run_id in chosen.items():
        # its own averaging, among the configurations it may use (the tracks nest)
        same = table[table.track.isin(candidates(track))]
        assert run_id == same.loc[same[f"val.ccc_{track}"].idxmax()].run_id


def test_tracks_nest_a_global_model_that_wins_is_the_personalized_pick_too():
    """The personalized track chooses among every configuration, the generalized among those that
    do not know who is listening: when a global model wins on validation it is both tracks'
    choice, and the personalized pick's validation CCC is never below the generalized pick's."""
    table = pd.DataFrame(
        {
            "run_id": ["per_listener", "global_a", "global_b", "calibrated"],
            "status": "done",
            "label": ["pl", "ga", "gb", "gc"],
            "track": ["personalized", "generalized", "generalized", "personalized"],
            "val.ccc_personalized": [0.30, 0.45, 0.20, 0.40],
            "val.ccc_generalized": [0.31, 0.44, 0.21, 0.39],
        }
    )
    best = best_per_track(table, "val")
    assert best["personalized"].run_id == best["generalized"].run_id == "global_a"
    assert best["personalized"].track == "generalized"  # the run keeps its own track
    summary = track_summary(table, "val").set_index("track")
    assert summary.loc["personalized", "config_track"] == "generalized"
    assert "a generalized configuration" in summary_markdown(summary.reset_index())
    # the partition this replaced would have picked the calibrated model (0.40 < 0.45)
    partitioned = table[table.track == "personalized"]
    assert partitioned.loc[partitioned["val.ccc_personalized"].idxmax()].run_id == "calibrated"
    # never below, on random grids
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 12))
        v = rng.uniform(-0.2, 0.8, n)
        grid = pd.DataFrame(
            {
                "run_id": [f"r{i}" for i in range(n)],
                "status": "done",
                "label": "x",
                "track": rng.choice(["personalized", "generalized"], n),
                "val.ccc_personalized": v,
                "val.ccc_generalized": v,  # a complete table: both averages agree
            }
        )
        picks = best_per_track(grid, "val")
        if "generalized" in picks:
            assert (
                picks["personalized"]["val.ccc_personalized"]
                >= picks["generalized"]["val.ccc_generalized"]
            )
    assert candidates("personalized") == ("personalized", "generalized")
    assert candidates("generalized") == ("generalized",)


def test_sweep_chooses_the_same_configurations_whatever_the_test_labels(
    planted_store, poisoned_store, tracking_dir
):
    """Selection uses validation only: replacing every test label changes the test scores, not the choice."""
    chosen, test_scores = [], []
    for name, root in (("clean", planted_store), ("poisoned", poisoned_store)):
        cfg = from_dict(
            config_dict(
                tracking_dir,
                f"select-{name}",
                # global models only: rescale none is the generalized track, listener personalized
                feature_set=["listener"],
                personalization=["global"],
                models=[{"name": "ridge", "alpha": [1, 1000]}],
                postprocess={"smooth_s": [0, 2], "rescale": ["none", "listener"]},
            )
        )
        res = run_sweep(cfg, store=root, options=SweepOptions(progress=False, log_artifacts=False))
        table = res.table.set_index("run_id")
        chosen.append({track: table.loc[rid, "label"] for track, rid in res.best_run_ids.items()})
        test_scores.append(
            {track: table.loc[rid, f"test.ccc_{track}"] for track, rid in res.best_run_ids.items()}
        )
    assert chosen[0] == chosen[1] and set(chosen[0]) == {"personalized", "generalized"}
    assert all(abs(test_scores[0][k] - test_scores[1][k]) > 0.2 for k in test_scores[0])


@pytest.mark.parametrize("selection", ["chosen", "nested", "fixed"])
def test_a_chosen_unseen_score_is_marked_wherever_the_summary_shows_it(selection):
    """Selection ``chosen`` read the left-out listener: its ``test_unseen`` number carries
    :data:`CHOSEN_UNSEEN_MARK` and a note in summary.md and in the several-target combined
    table; ``nested`` and ``fixed`` numbers carry neither."""
    from experiments.tracking.summary import combined_markdown, combined_summary

    # the grid's choice g (with its unseen-listener numbers, as a chosen twin carries them) and
    # a named configuration's unseen-listener run u (fixed)
    table = pd.DataFrame(
        {
            "run_id": ["g", "u"],
            "status": "done",
            "label": ["ridge", "named"],
            "track": ["generalized", "generalized"],
            "config_hash": ["g0", "u1"],
            "val.ccc_generalized": [0.5, np.nan],
            "test.ccc_generalized": [0.4, np.nan],
            "test_unseen.ccc_generalized": [0.3, 0.2],
            "unseen_of": [np.nan, "u0"],
        }
    )
    nested = pd.DataFrame({"ccc_test_unseen": [0.25, 0.35]})
    summary = track_summary(table, "val", selection, nested if selection == "nested" else None)
    md = summary_markdown(summary)
    combined = combined_summary({"a": summary, "b": summary})
    both = combined_markdown(["a", "b"], combined)
    unseen = next(line for line in md.splitlines() if line.startswith("| test_unseen |"))
    together = next(line for line in both.splitlines() if "| test_unseen |" in line)
    assert unseen.startswith(f"| test_unseen | {0.2 if selection == 'fixed' else 0.3:.3f}")
    flattered = selection == "chosen"
    assert (CHOSEN_UNSEEN_MARK in unseen) == flattered and (CHOSEN_UNSEEN_NOTE in md) == flattered
    assert (CHOSEN_UNSEEN_MARK in together) == flattered
    assert (CHOSEN_UNSEEN_NOTE in both) == flattered
