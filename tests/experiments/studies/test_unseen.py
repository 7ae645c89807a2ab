"""experiments.studies.unseen: each held-out listener's configuration chosen, fitted and
post-processed without them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from experiments.evaluation.evaluate import evaluate_trials, window_sessions
from experiments.executors.base import fit_groups
from experiments.studies.unseen import UNSEEN_COLUMNS, nested_unseen
from tests.experiments.helpers import LISTENERS, SPLITS, trials_for

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
    df, sweep = ablate(cfg, store=planted_store, out_dir=out, progress=False)
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


def test_a_fixed_configuration_is_scored_on_left_out_listeners(planted_store, tracking_dir):
    """``{selection: fixed, configuration: HASH}``: the configuration named before any data is
    run again on left-out listeners, whatever validation says; an unknown name fails."""
    from experiments.config.loading import from_dict
    from experiments.config.schema import ConfigError
    from experiments.studies.sweep import run_sweep
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
    res = run_sweep(cfg, store=planted_store, progress=False, log_artifacts=False)
    extra = res.table[res.table["unseen_of"].notna()]
    assert extra["unseen_of"].tolist() == [named.hash()]
    assert extra["test_unseen.ccc_generalized"].notna().all()
    bad = from_dict(
        config_dict(
            tracking_dir,
            "fixed-unseen",
            feature_set=["listener"],
            unseen_listener={"selection": "fixed", "configuration": "nope"},
        )
    )
    with pytest.raises(ConfigError, match="'nope' is no generalized configuration"):
        run_sweep(bad, store=planted_store, progress=False, log_artifacts=False)
