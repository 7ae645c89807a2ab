"""A child run's row of the sweep table (:class:`experiments.tracking.child_runs.RunRow`) and the
table made of them; what a sweep hands back (:class:`experiments.tracking.child_runs.Outcome`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.config.loading import expand, from_dict
from experiments.tracking.child_runs import Outcome, RunRow, identity_tags, sweep_table
from experiments.tracking.tracker import CONFIG_HASH_TAG
from tests.experiments.helpers import config_dict


def test_rows_make_the_sweep_table_with_the_columns_in_order():
    done = RunRow(
        "a",
        "done",
        "ridge",
        {CONFIG_HASH_TAG: "h1"},
        {"model.name": "ridge", "track": "personalized"},
        {"val.ccc_personalized": 0.5, "fit_seconds": 1.5},
    )
    failed = RunRow(
        "b",
        "failed",
        "svr",
        {CONFIG_HASH_TAG: "h2"},
        {"model.name": "svr", "track": "generalized"},
        error="ValueError: no sessions",
    )
    assert (done.failed, failed.failed) == (False, True)
    assert (done.config_hash, done.track, failed.track) == ("h1", "personalized", "generalized")
    assert list(done.to_dict()) == [
        "run_id",
        "status",
        "label",
        CONFIG_HASH_TAG,
        "model.name",
        "track",
        "val.ccc_personalized",
        "fit_seconds",
    ]
    assert failed.to_dict()["error"] == "ValueError: no sessions"
    table = sweep_table([done, failed])
    assert list(table.columns) == [*done.to_dict(), "error"]
    assert list(table.run_id) == ["a", "b"] and list(table.status) == ["done", "failed"]
    assert table.loc[0, "val.ccc_personalized"] == 0.5
    assert pd.isna(table.loc[1, "val.ccc_personalized"]) and pd.isna(table.loc[0, "error"])
    assert sweep_table([]).empty


def test_an_outcome_is_failed_only_without_result_or_row():
    trial = expand(from_dict(config_dict("mlruns")))[0]
    row = RunRow("r", "failed", trial.label(), identity_tags(trial), trial.params(), error="x")
    assert Outcome(trial, error="RuntimeError: boom").failed
    assert not Outcome(trial, row=row).failed  # the worker logged it: the row says how it went


def test_a_run_name_leads_with_feature_set_personalization_and_model():
    for trial in expand(from_dict(config_dict("mlruns"))):
        name = trial.label()
        lead = f"{trial.feature_set} {trial.personalization} {trial.model} "
        assert name.startswith(lead), name
        assert "rescale=none" not in name and len(name) < 60, name


def test_prediction_csv_has_the_bytes_of_savetxt(tmp_path):
    """The fast writer writes what ``np.savetxt(fmt="%.9f", header=<target>)`` writes, for
    ordinary values, the special ones and both float widths."""
    from experiments.tracking.child_runs import write_prediction_csv

    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-12, 2.0**-10, -(2.0**-10), 0.1234567895]
    for values in (
        np.r_[np.random.default_rng(0).uniform(-1, 1, 500), special],
        np.random.default_rng(1).uniform(-1, 1, 300).astype(np.float32),
        np.empty(0),
    ):
        np.savetxt(tmp_path / "old.csv", values, fmt="%.9f", header="arousal", comments="")
        write_prediction_csv(tmp_path / "new.csv", values, "arousal")
        assert (tmp_path / "new.csv").read_bytes() == (tmp_path / "old.csv").read_bytes()
