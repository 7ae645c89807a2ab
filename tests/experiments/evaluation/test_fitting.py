"""A fit group's ridge fits from sufficient statistics: the pipeline's scores on every ridge
configuration of the planted store, and the pipeline wherever the closed form does not apply."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments.config.models import model_spec
from experiments.evaluation import fitting
from experiments.evaluation.evaluate import evaluate_trials, fit_groups, window_sessions
from experiments.evaluation.fitting import FitPart, closed_form_parts, fit_parts
from tests.experiments.helpers import trials_for

#: the largest difference allowed between a metric of the closed form and the pipeline's
CCC_TOLERANCE = 1e-8


def _with_nan(w, rng):
    """``w`` with NaN planted in its features: column 0 empty in every story-2 session, 5 %
    of the other values scattered (training, validation and test sessions alike)."""
    sessions = []
    for s in w.sessions:
        F = s.F.copy()
        F[rng.random(F.shape) < 0.05] = np.nan
        if s.story == 2:
            F[:, 0] = np.nan
        sessions.append(dataclasses.replace(s, F=F))
    return dataclasses.replace(w, sessions=sessions)


def _metrics_by_pipeline(group, w, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(fitting, "closed_form_parts", lambda *args, **kwargs: {})
        return evaluate_trials(group, w)


@pytest.mark.parametrize(
    ("protocol", "fit_on", "planted_nan"),
    [
        ("val", "out_of_fold", False),
        ("val", "in_sample", True),
        ("loso", "out_of_fold", True),
        ("loso", "in_sample", False),
    ],
)
def test_every_ridge_configuration_gives_the_pipelines_scores(
    tables, monkeypatch, protocol, fit_on, planted_nan
):
    """Every ridge configuration of the planted store (both feature sets, every
    personalization, rescalings with and without listener identity, smoothing, unseen
    listeners): the CCC metrics of the closed form within 1e-8 of the pipeline's."""
    trials = trials_for(
        protocol=protocol,
        personalization=["global", "per_listener", "global_calibrated", "listener_onehot"],
        postprocess={
            "smooth_s": [0, 2],
            "rescale": ["none", "train", "listener"],
            "fit_on": fit_on,
        },
        unseen_listener=True,
    )
    ridge = [t for t in trials if t.model == "ridge"]
    used: list[FitPart] = []
    real = fitting.closed_form_parts

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        used.extend(out)
        return out

    monkeypatch.setattr(fitting, "closed_form_parts", spy)
    n_compared = 0
    for group in fit_groups(ridge):
        w = window_sessions(tables, group[0].window_key())
        if planted_nan:
            w = _with_nan(w, np.random.default_rng(7))
        used.clear()
        fast = evaluate_trials(group, w)
        # listener_onehot has no closed form: its main and out-of-fold fits are the pipeline's
        onehot = group[0].personalization == "listener_onehot"
        assert bool(used) != onehot or any(p.kind.startswith("unseen") for p in used)
        slow = _metrics_by_pipeline(group, w, monkeypatch)
        for a, b in zip(fast, slow, strict=True):
            assert a.metrics.keys() == b.metrics.keys() and a.n_train_rows == b.n_train_rows
            for key, value in b.metrics.items():
                if "ccc" in key:
                    assert abs(a.metrics[key] - value) <= CCC_TOLERANCE or (
                        np.isnan(value) and np.isnan(a.metrics[key])
                    ), (a.trial.label(), key, a.metrics[key], value)
                    n_compared += 1
            for sid, p in b.predictions.items():
                np.testing.assert_allclose(a.predictions[sid], p, rtol=0, atol=1e-9)
    assert n_compared > 100


def test_the_pipeline_fits_what_has_no_closed_form(tables):
    trials = trials_for(
        personalization=["global", "listener_onehot"],
        postprocess={"smooth_s": [0], "rescale": ["train"]},
        unseen_listener=True,
    )
    w = window_sessions(tables, trials[0].window_key())
    train = [s for s in w.sessions if s.split == "train"]
    evaluate = [s for s in w.sessions if s.split != "train"]
    by = {(t.model, t.personalization): t for t in trials if t.feature_set == "listener"}
    ridge = by["ridge", "global"]
    parts = fit_parts(ridge, train, evaluate, need_post_fit=True, need_unseen=True)
    assert set(closed_form_parts(ridge, parts, train, evaluate, True)) == set(parts)
    # another model, an option it cannot fold (alpha 0), a personalization without one
    dummy = by["dummy", "global"]
    assert closed_form_parts(dummy, parts, train, evaluate, True) == {}
    no_alpha = dataclasses.replace(ridge, model_params=(("alpha", 0.0),))
    assert closed_form_parts(no_alpha, parts, train, evaluate, True) == {}
    onehot = by["ridge", "listener_onehot"]
    assert closed_form_parts(onehot, [FitPart("main")], train, evaluate, True) == {}
    # an infinite feature: left to the pipeline, whose error the user gets
    bad = [dataclasses.replace(s, F=np.where(np.isnan(s.F), np.inf, s.F)) for s in train]
    bad[0].F[0, 0] = np.inf
    assert closed_form_parts(ridge, parts, bad, evaluate, True) == {}
    with pytest.raises(ValueError, match="(?i)infinity"):
        fitting.fit_part(ridge, FitPart("main"), bad, evaluate, True)


@pytest.mark.parametrize("personalization", ["global", "per_listener"])
def test_a_column_major_model_is_fitted_from_a_float64_design_with_the_same_trees(
    tables, monkeypatch, personalization
):
    """``hist_gb`` gets its training matrix column-major in float64 (its first step reads the
    feature columns as a view, no copy beside a float32 matrix): the same predictions, bit
    for bit, as from the row-major float32 design, with NaN and an empty column planted."""
    trials = trials_for(
        personalization=[personalization],
        models=[{"name": "hist_gb", "max_iter": [15], "max_depth": [3]}],
        postprocess={"smooth_s": [0], "rescale": ["none"]},
    )
    trial = trials[0]
    assert model_spec(trial.model).inputs == "columns"
    w = _with_nan(window_sessions(tables, trial.window_key()), np.random.default_rng(3))
    for s in w.sessions:
        s.F[:, 1] = np.nan  # empty at fit: FillEmptyColumns fills it
    train = [s for s in w.sessions if s.split == "train"]
    evaluate = [s for s in w.sessions if s.split != "train"]
    hop = max(1, int(round(trial.hop_s * train[0].fps)))
    X, y = fitting.design(train, hop, column_major=True)
    X32, y32 = fitting.design(train, hop)
    assert X.dtype == np.float64 and X.flags.f_contiguous and X32.dtype == np.float32
    np.testing.assert_array_equal(X, X32)
    np.testing.assert_array_equal(y, y32)
    seen = []
    real_fit = fitting.make_personalizer

    def spy(*args, **kwargs):
        model = real_fit(*args, **kwargs)
        fit = model.fit
        model.fit = lambda X, y: (seen.append((X.dtype, X.flags.f_contiguous)), fit(X, y))[1]
        return model

    monkeypatch.setattr(fitting, "make_personalizer", spy)
    column_major = fitting._fit(trial, train, personalization, evaluate)
    real_design = fitting.design
    monkeypatch.setattr(fitting, "design", lambda *a, **k: real_design(*a[:3], column_major=False))
    row_major = fitting._fit(trial, train, personalization, evaluate)
    assert seen == [(np.float64, True), (np.float32, False)]
    for s in evaluate:
        np.testing.assert_array_equal(
            fitting._predict_filled(trial, column_major, s),
            fitting._predict_filled(trial, row_major, s),
        )
