"""experiments.studies.unseen: each held-out listener's configuration chosen, fitted and
post-processed without them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from experiments.evaluation.evaluate import evaluate_trials, fit_groups, window_sessions
from experiments.studies.sweep import SweepOptions
from experiments.studies.unseen import UNSEEN_COLUMNS, nested_unseen
from tests.experiments.helpers import LISTENERS, SPLITS, counted_fits, trials_for

HELD = 1


def _grid():
    """Generalized configurations that differ in what selection can see: ridge strength,
    smoothing and rescaling; every one with the unseen-listener protocol on."""
    trials = trials_for(
        models=[{"name": "ridge", "alpha": [0.1, 1000]}],
        personalization=["global"],
        postprocess={
            "smooth_s": [0, 4],
            "smooth_method": ["moving_average"],
            "rescale": ["none", "train"],
        },
    )
    out = [
        dataclasses.replace(t, unseen_listener=True) for t in trials if t.feature_set == "listener"
    ]
    assert len(out) == 8 and {t.track for t in out} == {"generalized"}
    return out


def _sweep(trials, w):
    """The sweep's table (one row per configuration) and each configuration's result."""
    results = {}
    for group in fit_groups(trials):
        for t, r in zip(group, evaluate_trials(list(group), w), strict=True):
            results[t.hash()] = r
    table = pd.DataFrame(
        [
            {
                "run_id": h,
                "config_hash": h,
                "status": "done",
                "features.set": r.trial.feature_set,
                "label": r.trial.label(),
                **r.metrics,
            }
            for h, r in results.items()
        ]
    )
    return table, results


def test_a_held_out_listener_is_chosen_and_predicted_without_them(tables):
    trials = _grid()
    w = window_sessions(tables, trials[0].window_key())
    table, results = _sweep(trials, w)
    rows = nested_unseen(table)
    assert list(rows.columns) == UNSEEN_COLUMNS
    assert sorted(rows.listener) == list(LISTENERS) and (rows.n_candidates == len(trials)).all()
    # a left-out listener is scored on test only: its validation labels choose for the others
    assert all(set(r.scores.split) == {"val", "test", "test_unseen"} for r in results.values())
    assert not [k for r in results.values() for k in r.metrics if k.startswith("val_unseen.")]
    # each chosen configuration is the best on the other listeners' validation stories
    for r in rows.itertuples():
        assert r.selection_ccc == table[r.selection_metric].max()
        assert (
            r.ccc_test_unseen == results[r.run_id].metrics[f"test_unseen.ccc_listener_{r.listener}"]
        )

    # poison the held-out listener's training and validation labels: validation labels made
    # equal to the predictions of the configuration that chose worst, so that an all-listener
    # choice moves towards it
    worst = table.loc[table["val.ccc_generalized"].idxmin(), "run_id"]
    rng = np.random.default_rng(11)
    poisoned = dataclasses.replace(
        w,
        sessions=[
            dataclasses.replace(
                s,
                y=(
                    results[worst].predictions[s.session]
                    if s.story in SPLITS["val"]
                    else rng.uniform(-1, 1, len(s.y))
                ).astype(np.float32),
            )
            if s.listener == HELD and s.story in SPLITS["train"] + SPLITS["val"]
            else s
            for s in w.sessions
        ],
    )
    bad_table, bad_results = _sweep(trials, poisoned)
    bad_rows = nested_unseen(bad_table)
    clean, bad = (x.set_index("listener").loc[HELD] for x in (rows, bad_rows))
    # the held-out listener: the same choice, the same predictions, the same score
    assert bad.run_id == clean.run_id and bad.selection_ccc == clean.selection_ccc
    for sid, pred in results[clean.run_id].unseen_predictions.items():
        if sid.startswith(f"Subject_{HELD}_"):
            np.testing.assert_array_equal(pred, bad_results[clean.run_id].unseen_predictions[sid])
    assert bad.ccc_test_unseen == clean.ccc_test_unseen
    # ... while everything that saw them moved: the other listeners' selection scores, and the
    # all-listener validation ranking
    others = [L for L in LISTENERS if L != HELD]
    assert any(
        not np.allclose(
            table[f"val_without_listener_{L}.ccc_generalized"],
            bad_table[f"val_without_listener_{L}.ccc_generalized"],
        )
        for L in others
    )
    assert not np.allclose(table["val.ccc_generalized"], bad_table["val.ccc_generalized"])
    # the all-listener choice (what the old protocol chose with) does flip
    chosen = (t.loc[t["val.ccc_generalized"].idxmax(), "run_id"] for t in (table, bad_table))
    assert next(chosen) != next(chosen)


def test_the_ablation_reports_each_left_out_listeners_choice(planted_store, tracking_dir, tmp_path):
    """``unseen_listener: {selection: nested}``: every generalized configuration is fitted without
    each listener; reports/ablation_unseen.csv holds one row per feature set and listener, with
    the chosen run, whose test_unseen predictions the export writes; the ablation's unseen column
    is the mean of those rows."""
    from experiments.config.loading import from_dict
    from experiments.studies.ablation import ablate
    from experiments.tracking.summary import best_per_track
    from tests.experiments.helpers import config_dict

    cfg = from_dict(
        config_dict(tracking_dir, "nested-unseen", unseen_listener={"selection": "nested"})
    )
    assert cfg.unseen_selection == "nested"
    out = tmp_path / "reports"
    df, sweep = ablate(cfg, store=planted_store, out_dir=out, options=SweepOptions(progress=False))
    rows = pd.read_csv(out / "ablation_unseen.csv")
    assert list(rows.columns) == UNSEEN_COLUMNS
    assert sorted(zip(rows.feature_set, rows.listener, strict=True)) == sorted(
        (fs, L) for fs in ("speaker", "listener") for L in LISTENERS
    )
    table = sweep.table.set_index("run_id")
    for r in rows.itertuples():
        assert table.at[r.run_id, "track"] == "generalized"
        assert table.at[r.run_id, "features.set"] == r.feature_set
        assert r.ccc_test_unseen == table.at[r.run_id, f"test_unseen.ccc_listener_{r.listener}"]
    # the grid still competes whole: no configuration was set aside as an extra run
    assert set(best_per_track(sweep.table, "val")) == {"personalized", "generalized"}
    test = df[df.split == "test"].set_index("feature_set")
    for fs, g in rows.groupby("feature_set"):
        assert test.at[fs, "ccc_unseen_listener"] == pytest.approx(g.ccc_test_unseen.mean())
    assert test.at["listener", "ccc_unseen_listener"] > 0.5
    assert "test unseen listeners (nested)" in (out / "ablation.md").read_text()
    # the sweep summary: each left-out listener's choice among every feature set's
    # configurations, their mean as best_generalized.test_unseen, and the selection named
    every = sweep.nested_unseen
    assert sweep.unseen_selection == "nested" and sorted(every.listener) == list(LISTENERS)
    for r in every.itertuples():
        metric = f"val_without_listener_{r.listener}.ccc_generalized"
        assert r.selection_ccc == sweep.table[metric].max()
    from mlflow import MlflowClient

    from experiments.tracking.tracker import resolve_tracking_uri

    client = MlflowClient(tracking_uri=resolve_tracking_uri(cfg.tracking.uri))
    parent = client.get_run(sweep.parent_run_id)
    assert parent.data.tags["unseen_selection"] == "nested"
    assert parent.data.metrics["best_generalized.test_unseen.ccc_generalized"] == pytest.approx(
        every.ccc_test_unseen.mean()
    )
    assert not [k for k in parent.data.metrics if "val_unseen" in k]
    md = open(client.download_artifacts(sweep.parent_run_id, "summary.md", str(tmp_path))).read()
    assert "selection `nested`: each left-out listener's configuration chosen" in md
    assert "# Unseen listeners, nested: each left-out listener's configuration" in md


def test_a_fixed_configuration_is_scored_on_left_out_listeners(planted_store, tracking_dir):
    """``{selection: fixed, configuration: HASH}``: the configuration named before any data is
    run again on left-out listeners, whatever validation says; an unknown name fails."""
    from experiments.config.loading import from_dict
    from experiments.studies.sweep import run_sweep
    from featurestore.errors import ConfigError
    from tests.experiments.helpers import config_dict, pick

    named = pick(trials_for(feature_set=["listener"]), "listener", smooth_s=2.0)
    cfg = from_dict(
        config_dict(
            tracking_dir,
            "fixed-unseen",
            feature_set=["listener"],
            unseen_listener={"selection": "fixed", "configuration": named.hash()},
        )
    )
    res = run_sweep(
        cfg, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
    )
    extra = res.table[res.table["unseen_of"].notna()]
    assert extra["unseen_of"].tolist() == [named.hash()]
    assert extra["test_unseen.ccc_generalized"].notna().all()
    # the summary reports the named configuration's unseen-listener score, and says so
    from experiments.tracking.summary import summary_markdown, track_summary

    assert res.unseen_selection == "fixed" and res.nested_unseen.empty
    summary = track_summary(res.table, "val", res.unseen_selection, res.nested_unseen)
    generalized = summary.set_index("track").loc["generalized"]
    assert generalized["test_unseen.ccc_generalized"] == pytest.approx(
        extra["test_unseen.ccc_generalized"].iloc[0]
    )
    assert generalized.unseen_label == named.label()
    assert (
        f"selection `fixed`: the configuration named in the config before any data ({named.label()})"
        in (summary_markdown(summary))
    )
    bad = from_dict(
        config_dict(
            tracking_dir,
            "fixed-unseen",
            feature_set=["listener"],
            unseen_listener={"selection": "fixed", "configuration": "nope"},
        )
    )
    with pytest.raises(ConfigError, match="'nope' is no generalized configuration"):
        run_sweep(
            bad, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
        )


def test_nested_under_loso_chooses_on_the_others_out_of_fold_scores(tables):
    """Protocol ``loso``: each held-out listener's configuration is chosen on the other
    listeners' LOSO scores, each of their train + val stories predicted by models fitted without
    that story and without the held-out listener; poisoning the held-out listener's train + val
    labels moves the all-listener LOSO scores but not that listener's choice or predictions."""
    trials = [
        dataclasses.replace(t, protocol="loso", unseen_nested=True)
        for t in _grid()
        if t.smooth_s == 4  # 4 configurations: ridge strength x rescaling
    ]
    assert len(trials) == 4 and all(t.params()["unseen_listener"] == "nested" for t in trials)
    w = window_sessions(tables, trials[0].window_key())
    table, results = _sweep(trials, w)
    rows = nested_unseen(table, "loso")
    assert sorted(rows.listener) == list(LISTENERS) and (rows.n_candidates == len(trials)).all()
    assert not nested_unseen(table, "val").size  # no validation split chose anything
    pool = SPLITS["train"] + SPLITS["val"]
    for r in rows.itertuples():
        assert r.selection_metric == f"loso_without_listener_{r.listener}.ccc_generalized"
        assert r.selection_ccc == table[r.selection_metric].max()
        metrics = results[r.run_id].metrics
        assert r.ccc_test_unseen == metrics[f"test_unseen.ccc_listener_{r.listener}"]
    # the held-out score is on test only: no val_unseen, no loso_unseen
    for r in results.values():
        assert set(r.scores.split) == {"loso", "test", "test_unseen"}
        assert not [k for k in r.metrics if k.startswith(("val_unseen.", "loso_unseen."))]

    rng = np.random.default_rng(5)
    poisoned = dataclasses.replace(
        w,
        sessions=[
            dataclasses.replace(s, y=rng.uniform(-1, 1, len(s.y)).astype(np.float32))
            if s.listener == HELD and s.story in pool
            else s
            for s in w.sessions
        ],
    )
    bad_table, bad_results = _sweep(trials, poisoned)
    bad_rows = nested_unseen(bad_table, "loso")
    clean, bad = (x.set_index("listener").loc[HELD] for x in (rows, bad_rows))
    metric = f"loso_without_listener_{HELD}.ccc_generalized"
    np.testing.assert_array_equal(table[metric], bad_table[metric])  # every candidate's score
    assert bad.run_id == clean.run_id and bad.ccc_test_unseen == clean.ccc_test_unseen
    for h, r in results.items():  # every configuration's predictions of the held-out listener
        for sid, pred in r.unseen_predictions.items():
            if sid.startswith(f"Subject_{HELD}_"):
                np.testing.assert_array_equal(pred, bad_results[h].unseen_predictions[sid])
    # ... while what saw them moved: the all-listener LOSO scores and the others' nested scores
    assert not np.allclose(table["loso.ccc_generalized"], bad_table["loso.ccc_generalized"])
    others = [L for L in LISTENERS if L != HELD]
    assert any(
        not np.allclose(
            table[f"loso_without_listener_{L}.ccc_generalized"],
            bad_table[f"loso_without_listener_{L}.ccc_generalized"],
        )
        for L in others
    )


def test_the_ablation_nests_under_loso(planted_store, tracking_dir, tmp_path):
    """``protocol: loso`` with ``unseen_listener: {selection: nested}`` runs (it was refused):
    each left-out listener's configuration is chosen on the others' LOSO scores, and the
    ablation's unseen column on test is the mean of those choices' scores."""
    from experiments.config.loading import from_dict
    from experiments.studies.ablation import ablate
    from tests.experiments.helpers import config_dict

    cfg = from_dict(
        config_dict(
            tracking_dir,
            "nested-unseen-loso",
            protocol="loso",
            models=[{"name": "ridge", "alpha": [10, 10000]}],
            personalization=["global"],
            postprocess={"smooth_s": [0], "rescale": ["none"]},
            unseen_listener={"selection": "nested"},
        )
    )
    out = tmp_path / "reports"
    df, sweep = ablate(cfg, store=planted_store, out_dir=out, options=SweepOptions(progress=False))
    rows = pd.read_csv(out / "ablation_unseen.csv")
    assert sorted(zip(rows.feature_set, rows.listener, strict=True)) == sorted(
        (fs, L) for fs in ("speaker", "listener") for L in LISTENERS
    )
    assert all(
        m == f"loso_without_listener_{L}.ccc_generalized"
        for m, L in zip(rows.selection_metric, rows.listener, strict=True)
    )
    # every generalized configuration of the set competes: two ridge strengths (and the dummy
    # baseline, which the sweep adds once)
    per_set = sweep.table[sweep.table.track == "generalized"].groupby("features.set").size()
    assert [per_set[r.feature_set] for r in rows.itertuples()] == rows.n_candidates.tolist()
    assert (rows.n_candidates >= 2).all()
    test = df[df.split == "test"].set_index("feature_set")
    for fs, g in rows.groupby("feature_set"):
        assert test.at[fs, "ccc_unseen_listener"] == pytest.approx(g.ccc_test_unseen.mean())
    assert df[df.split == "loso"].ccc_unseen_listener.isna().all()
    assert "test unseen listeners (nested)" in (out / "ablation.md").read_text()
    assert sweep.unseen_selection == "nested" and len(sweep.nested_unseen) == len(LISTENERS)


def test_a_personalized_configuration_and_its_nested_twin_share_their_fits(tables, monkeypatch):
    """Under nested selection the generalized configuration (``train`` rescaling, marked for
    the models without each listener) and the personalized one of the same model (``listener``
    rescaling) are one fit group: the main and out-of-fold models fitted once, the models
    without each listener besides; each gets the results it gets alone."""
    from experiments.evaluation import fitting

    trials = trials_for(
        models=[{"name": "ridge", "alpha": [10]}],
        personalization=["global"],
        postprocess={"smooth_s": [0], "rescale": ["listener", "train"]},
    )
    pers, gen = (t for t in trials if t.feature_set == "listener")
    gen = dataclasses.replace(gen, unseen_listener=True, unseen_nested=True)
    assert (pers.track, gen.track) == ("personalized", "generalized")
    assert fit_groups([pers, gen]) == [(pers, gen)]
    w = window_sessions(tables, pers.window_key())
    fits = counted_fits(monkeypatch)
    monkeypatch.setattr(fitting, "closed_form_parts", lambda *a, **k: {})  # each fit counted
    together = evaluate_trials([pers, gen], w)
    shared = len(fits)
    alone = [evaluate_trials([t], w)[0] for t in (pers, gen)]
    separate = len(fits) - shared
    main_and_folds = 1 + len(SPLITS["train"])  # the fits the personalized configuration needs
    assert shared == separate - main_and_folds
    for a, b in zip(together, alone, strict=True):
        assert a.metrics.keys() == b.metrics.keys()
        for k, v in a.metrics.items():
            if k != "fit_seconds":
                assert v == pytest.approx(b.metrics[k], abs=1e-12, nan_ok=True), k
        assert set(a.unseen_predictions) == set(b.unseen_predictions)
    assert not together[0].unseen_predictions and together[1].unseen_predictions
