"""A causal trained model frame by frame equals its offline predictions; a model that reads
later frames is refused with its lookahead; ``experiments predict --stream`` on stdin rows."""

from __future__ import annotations

import io
import warnings
from dataclasses import replace

import numpy as np
import pytest

from experiments.trained.model import (
    ModelError,
    frame_table,
    save_model,
    store_tables,
    train_model,
)
from experiments.trained.stream import StreamingModel, stream_csv
from tests.experiments.helpers import pick, trials_for

CAUSAL = [
    # (model, params, personalization, rescale, smooth_method)
    ("ridge", (("alpha", 10.0),), "per_listener", "listener", "trailing"),
    ("ridge", (("alpha", 10.0),), "global_calibrated", "train", "causal_butterworth"),
    ("xgboost", (("n_estimators", 10), ("max_depth", 3)), "global", "bias", "trailing"),
]


def _causal(model, params, personalization, rescale, method, delay_s=1.0):
    base = pick(trials_for(), "listener")
    return replace(
        base,
        lengths_s=(1.0, 2.0),
        delay_s=delay_s,
        align="causal",
        stats=("mean", "std", "slope", "min", "max", "valid_frac"),
        model=model,
        model_params=params,
        personalization=personalization,
        rescale=rescale,
        smooth_s=2.0,
        smooth_method=method,
    )


@pytest.mark.parametrize("variant", CAUSAL, ids=lambda v: f"{v[0]}-{v[2]}-{v[4]}")
def test_frame_by_frame_equals_the_whole_session(planted_store, tables, variant):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = train_model(_causal(*variant), planted_store)
    for t in store_tables(planted_store, model.trial, [t.session for t in tables[:3]]):
        stream = StreamingModel(model, t.listener)
        got = [stream.push(t.X[i], t.valid[i]) for i in range(t.n_frames)]
        np.testing.assert_allclose(
            got, model.predict_table(t), rtol=0, atol=1e-9, err_msg=t.session
        )


def test_a_model_that_reads_later_frames_is_refused(planted_store):
    centred = pick(trials_for(), "listener")  # 2 s centred windows, a 1 s delay: 0 frames ahead
    model = train_model(replace(centred, lengths_s=(4.0,), smooth_s=0.0), planted_store)
    with pytest.raises(ModelError, match=r"reads 1 s of later frames \(windows centred, delay 1 s"):
        StreamingModel(model)
    smoothed = train_model(replace(centred, smooth_s=2.0), planted_store)
    with pytest.raises(ModelError, match="moving_average 2 s"):
        StreamingModel(smoothed)


def test_predict_stream_reads_rows_from_stdin(planted_store, tables, tmp_path):
    model = train_model(_causal(*CAUSAL[0]), planted_store)
    folder = tmp_path / "model"
    save_model(model, folder / "artifacts" / "trained")
    t = tables[1]
    rows = io.StringIO(frame_table(t).head(60).to_csv(index=False))
    out = io.StringIO()
    assert stream_csv(str(folder), None, rows, out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "valence_self" and len(lines) == 61
    want = model.predict_table(t)[:60]  # causal: the first 60 frames' predictions need only them
    np.testing.assert_allclose(np.array(lines[1:], float), want, rtol=0, atol=1e-9)
    with pytest.raises(ModelError, match="lacks"):
        stream_csv(str(folder), None, io.StringIO("a,b\n1,2\n"), io.StringIO())
