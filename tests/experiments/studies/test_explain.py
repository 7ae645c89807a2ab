"""``experiments explain RUN_ID`` on a store where one column carries the signal: the run is
refitted as it ran, the column ranks first, the reports are written and logged to the run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from experiments.cli import main
from experiments.config.loading import from_dict
from experiments.data.dataset import load_sessions
from experiments.studies.explain import sweep_channels, trials_by_hash
from experiments.studies.sweep import SweepOptions, grid_trials, run_sweep
from experiments.tracking.tracker import resolve_tracking_uri
from experiments.windowing.windowed import window_sessions
from tests.experiments.helpers import build_planted_column_store, config_dict

CHANNELS = ["listener/face_geom", "speaker/face_geom"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory, tracking_dir):
    """(store folder, sweep result, tracking URI): dummy and one ridge on both channels."""
    root = tmp_path_factory.mktemp("planted_column_store")
    build_planted_column_store(root)
    cfg = from_dict(
        config_dict(
            tracking_dir,
            "explain",
            feature_sets={"both": CHANNELS},
            personalization=["global"],
            postprocess={"smooth_s": [2], "rescale": ["train"]},
        )
    )
    res = run_sweep(cfg, store=root, options=SweepOptions(progress=False))
    assert res.n_failed == 0
    return root, res, resolve_tracking_uri(tracking_dir)


def _run_of(res, model):
    return res.table[res.table["model.name"] == model].run_id.iloc[0]


def test_explain_ranks_the_signal_column_and_logs_to_the_run(swept, tmp_path, capsys):
    root, res, uri = swept
    run_id = _run_of(res, "ridge")
    out = tmp_path / "reports"
    args = ["explain", run_id, "--store", str(root), "--tracking-uri", uri, "--out", str(out)]
    assert main([*args, "--repeats", "3", "--levels", "channel", "column"]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "importance_both_generalized.csv")
    cols = table[table.level == "column"].reset_index(drop=True)
    assert cols.group[0] == "listener/face_geom/c0" and cols.ci_low[0] > 0.3
    noise = cols.set_index("group").loc["listener/face_geom/c3"]
    assert noise.ci_low <= 0 <= noise.ci_high
    # the refit is the run: its unpermuted CCC is the logged one
    logged = MlflowClient(uri).get_run(run_id).data.metrics
    assert table.ccc.iloc[0] == pytest.approx(logged["test.ccc_generalized"], abs=1e-6)
    assert "listener/face_geom/c0" in printed and "logged" in printed
    for name in ("importance_both_generalized.png", "ccc_per_session_both_generalized.png"):
        assert (out / name).stat().st_size > 5000
    client = MlflowClient(uri)
    logged_files = {f.path for f in client.list_artifacts(run_id, "importance")}
    assert logged_files >= {
        "importance/importance_both_generalized.csv",
        "importance/importance_both_generalized.png",
        "importance/importance_both_generalized.json",
        "importance/ccc_per_session_both_generalized.png",
    }
    metrics = client.get_run(run_id).data.metrics
    assert metrics["importance.column.listener/face_geom/c0.generalized"] == pytest.approx(
        cols.importance[0]
    )
    # the personalized averaging on request
    assert main([*args, "--levels", "channel", "--repeats", "2", "--track", "personalized"]) == 0
    pers = pd.read_csv(out / "importance_both_personalized.csv")
    assert set(pers.track) == {"personalized"} and pers.group[0] == "listener/face_geom"


def test_explain_refuses_a_baseline_and_an_unknown_run(swept, tmp_path, capsys):
    root, res, uri = swept
    base = ["--store", str(root), "--tracking-uri", uri, "--out", str(tmp_path)]
    assert main(["explain", _run_of(res, "dummy"), *base]) == 1
    assert "baseline" in capsys.readouterr().err
    assert main(["explain", "0" * 32, *base]) == 1
    assert "no run" in capsys.readouterr().err
    assert main(["explain", res.parent_run_id, *base]) == 1
    assert "child run" in capsys.readouterr().err


def test_explain_against_another_store_stops_or_logs_into_a_new_run(swept, tmp_path, capsys):
    """It once exited 0 with a warning and logged the other store's importance into the run."""
    import shutil

    root, res, uri = swept
    run_id = _run_of(res, "ridge")
    other = tmp_path / "other"
    shutil.copytree(root, other)
    for s in ("Subject_4_Story_1", "Subject_5_Story_1"):
        (other / f"{s}.h5").unlink()
    client = MlflowClient(uri)
    before = client.get_run(run_id).data.metrics, client.list_artifacts(run_id, "importance")
    args = ["explain", run_id, "--store", str(other), "--tracking-uri", uri, "--repeats", "1"]
    args += ["--levels", "channel", "--out", str(tmp_path / "reports")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"run {run_id} was fitted on another store (fingerprint " in err
    assert f"than {other} (" in err and "pass --new-run" in err
    assert not (tmp_path / "reports").exists()
    assert main([*args, "--new-run"]) == 0
    assert "logged to run" in capsys.readouterr().out
    after = client.get_run(run_id).data.metrics, client.list_artifacts(run_id, "importance")
    assert after[0] == before[0] and [f.path for f in after[1]] == [f.path for f in before[1]]
    experiment = client.get_run(run_id).info.experiment_id
    (new,) = client.search_runs([experiment], f"tags.explains_run = '{run_id}'")
    assert new.info.status == "FINISHED" and new.info.run_id != run_id
    assert any(k.startswith("importance.channel.") for k in new.data.metrics)
    assert (
        new.data.tags["store_fingerprint"] != client.get_run(run_id).data.tags["store_fingerprint"]
    )


@pytest.mark.parametrize("unseen", [False, True, {"selection": "chosen"}, {"selection": "nested"}])
def test_every_configuration_a_sweep_logs_is_found_by_its_hash(unseen):
    # the ablation finds each chosen run's configuration by the hash the sweep logged; under
    # nested selection every generalized configuration carries unseen_nested (it was missed)
    cfg = from_dict(config_dict("mlruns", "hashes", unseen_listener=unseen))
    by_hash = trials_by_hash(cfg)
    logged = grid_trials(cfg)
    assert logged and all(t.hash() in by_hash for t in logged)
    if unseen == {"selection": "nested"}:
        assert any(t.unseen_nested for t in logged)


def test_explain_lays_the_features_out_as_the_sweep_did(tmp_path):
    """The sweep loads every channel sorted, and a configuration's columns follow the load
    order; a model's fit depends on the column order (the full-size ablation's gradient boosting
    on ``both``: 6e-8 off in test CCC when refitted on the feature set's own order), so explain
    loads the channels as the sweep did, whatever order the feature set lists them in."""
    build_planted_column_store(tmp_path)
    cfg = from_dict(
        config_dict(
            "unused",
            feature_sets={"both": list(reversed(CHANNELS))},
            personalization=["global"],
            postprocess={"smooth_s": [2], "rescale": ["train"]},
        )
    )
    trial = grid_trials(cfg)[-1]
    assert list(trial.channels) != sorted(trial.channels)
    key = trial.window_key()
    swept = window_sessions(load_sessions(tmp_path, sorted(CHANNELS), cache=False), key)
    explained = window_sessions(load_sessions(tmp_path, sweep_channels(trial), cache=False), key)
    own = window_sessions(load_sessions(tmp_path, list(trial.channels), cache=False), key)
    assert explained.names == swept.names != own.names
    for a, b in zip(explained.sessions, swept.sessions, strict=True):
        np.testing.assert_array_equal(a.F, b.F)
