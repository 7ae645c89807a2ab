"""The CCC averaging as a corpus's choice: the mean over sessions (OMG-Empathy) or one CCC over
the concatenated sessions (AVEC); the reports say which."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.config import ConfigError
from experiments.evaluation.evaluate import evaluate_trial, score_metrics, window_sessions
from experiments.evaluation.metrics import ccc, concatenated_score
from experiments.tracking.summary import summary_markdown
from tests.experiments.helpers import config_dict, from_dict, pick, trials_for

GLOBAL = {
    "personalization": ["global"],
    "postprocess": {"smooth_s": [0], "smooth_method": ["moving_average"], "rescale": ["none"]},
}


def _two_sessions():
    """Two sessions at different levels, each predicted with the right shape at a flat level:
    per session the CCC is modest, concatenated the level difference is rewarded."""
    t = np.linspace(0, 2 * np.pi, 200)
    truth = {"a": 0.5 + 0.1 * np.sin(t), "b": -0.5 + 0.1 * np.sin(t)}
    predictions = {"a": 0.4 + 0.05 * np.sin(t), "b": -0.4 + 0.05 * np.sin(t)}
    scores = pd.DataFrame(
        [
            {
                "session": s,
                "listener": i + 1,
                "story": 1,
                "split": "val",
                "ccc": ccc(truth[s], predictions[s]),
            }
            for i, s in enumerate(("a", "b"))
        ]
    )
    return truth, predictions, scores


def test_concatenated_and_session_averaging_differ_and_are_logged_side_by_side():
    truth, predictions, scores = _two_sessions()
    joined = concatenated_score(truth, predictions, ["a", "b"])
    assert joined == pytest.approx(
        ccc(
            np.concatenate([truth["a"], truth["b"]]),
            np.concatenate([predictions["a"], predictions["b"]]),
        )
    )
    per_session = float(scores.ccc.mean())
    assert joined > per_session + 0.1  # the level difference counts only when concatenated
    kw = {"predictions": predictions, "truth": truth, "fps": 25.0}
    omg = score_metrics(scores, averaging="sessions", **kw)
    avec = score_metrics(scores, averaging="concatenated", **kw)
    assert omg["val.ccc_generalized"] == pytest.approx(per_session)
    assert avec["val.ccc_generalized"] == avec["val.ccc_personalized"] == pytest.approx(joined)
    assert omg["val.ccc_concatenated"] == avec["val.ccc_concatenated"] == pytest.approx(joined)
    assert np.isnan(avec["val.ccc_generalized.ci_low"])  # intervals over listeners are of the means
    with pytest.raises(ValueError, match="needs the predictions"):
        score_metrics(scores, averaging="concatenated")


def test_a_sweep_configuration_scores_and_reports_its_averaging(tables):
    trial = pick(trials_for(averaging="concatenated", **GLOBAL), "listener")
    plain = pick(trials_for(**GLOBAL), "listener")
    assert trial.params()["ccc_averaging"] == "concatenated" and trial.hash() != plain.hash()
    res = evaluate_trial(trial, window_sessions(tables, trial.window_key()))
    val = [s for s in res.scores[res.scores.split == "val"].session]
    assert res.metrics["val.ccc_generalized"] == pytest.approx(
        concatenated_score(res.truth, res.predictions, val)
    )
    summary = pd.DataFrame(
        [
            {
                "track": "generalized",
                "run_id": "r",
                "label": "x",
                "chosen_on": "val.ccc_generalized",
                "ccc_averaging": "concatenated",
                "val.ccc_generalized": 0.3,
            }
        ]
    )
    assert "CCC averaging: one CCC over each split's sessions concatenated, as AVEC" in (
        summary_markdown(summary)
    )


def test_an_unknown_averaging_is_refused_with_the_key():
    with pytest.raises(ConfigError, match="averaging"):
        from_dict(config_dict("unused", averaging="avec"))
    assert from_dict(config_dict("unused")).averaging == "sessions"
