"""The MLflow pyfunc of a trained model: loaded in plain Python, registered, served over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.trained.model import ModelError, frame_table, train_model
from experiments.trained.pyfunc import (
    SESSION_COLUMN,
    fetch_model,
    log_model,
    model_uri,
    predict_frames,
    register,
    save_pyfunc,
)
from tests.experiments.helpers import cli_env, free_port, pick, trials_for, wait_healthy


@pytest.fixture(scope="module")
def trained(planted_store):
    trial = replace(pick(trials_for(), "listener", personalization="per_listener"), smooth_s=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return train_model(trial, planted_store)


def _json_body(frames: pd.DataFrame) -> bytes:
    """MLflow's ``dataframe_split`` request, every float as Python writes it (exact), NaN as null."""
    split = frames.astype(object).where(frames.notna(), None).to_dict(orient="split", index=False)
    return json.dumps({"dataframe_split": split}).encode()


def test_the_pyfunc_predicts_as_the_model_in_plain_python(trained, tables, tmp_path):
    import mlflow

    save_pyfunc(trained, tmp_path / "model", frame_table(tables[0]))
    loaded = mlflow.pyfunc.load_model(str(tmp_path / "model"))
    two = [frame_table(t).assign(**{SESSION_COLUMN: t.session}) for t in tables[:2]]
    out = loaded.predict(pd.concat(two, ignore_index=True))
    assert list(out.columns) == [SESSION_COLUMN, trained.trial.target]
    for t in tables[:2]:
        got = out[out[SESSION_COLUMN] == t.session][trained.trial.target].to_numpy()
        np.testing.assert_allclose(got, trained.predict_table(t), rtol=0, atol=1e-12)
    one = loaded.predict(frame_table(tables[2]))
    np.testing.assert_allclose(one.iloc[:, 0], trained.predict_table(tables[2]), rtol=0, atol=1e-12)


def test_model_names():
    assert (
        model_uri("0123456789abcdef0123456789abcdef")
        == "runs:/0123456789abcdef0123456789abcdef/model"
    )
    assert model_uri("models:/omg-personalized@chosen") == "models:/omg-personalized@chosen"
    with pytest.raises(ModelError, match="names no model"):
        model_uri("best")


@pytest.mark.slow
def test_a_registered_model_serves_over_http(trained, tables, tracking_dir, tmp_path):
    """``mlflow models serve -m models:/<name>@chosen --env-manager local`` on 127.0.0.1 answers
    a session's frame table with its predictions, and predict_frames's numbers."""
    from experiments.tracking.tracker import Tracker, resolve_tracking_uri

    tracker = Tracker(resolve_tracking_uri(tracking_dir), "serve-test")
    run_id = tracker.start_run("a configuration")
    tracker.finish(run_id)
    log_model(tracker.client, run_id, trained, frame_table(tables[0]))
    assert register(tracker.client, run_id, "serve-test-personalized") == "1"
    uri = "models:/serve-test-personalized@chosen"
    fetched = fetch_model(uri, resolve_tracking_uri(tracking_dir))
    np.testing.assert_array_equal(
        fetched.predict_table(tables[1]), trained.predict_table(tables[1])
    )

    port = free_port()
    env = cli_env() | {"MLFLOW_TRACKING_URI": resolve_tracking_uri(tracking_dir)}
    # `mlflow models serve --env-manager local` execs uvicorn by name: the venv's bin on PATH
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local"]
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*cmd, "-h", "127.0.0.1", "-p", str(port)], env=env, stdout=out, stderr=out
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log=log)
        frames = frame_table(tables[1])
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations",
            _json_body(frames),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            rows = json.loads(answer.read())["predictions"]
        served = np.array([r[trained.trial.target] for r in rows])
        want = predict_frames(trained, frames)[trained.trial.target].to_numpy()
        np.testing.assert_allclose(served, want, rtol=0, atol=1e-9)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
