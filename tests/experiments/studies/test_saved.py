"""``experiments sweep`` registers each track's choice; ``predict`` with it equals the run's logged
predictions; ``save`` refits any run and refuses another store."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import yaml
from mlflow import MlflowClient

from experiments.cli import main
from tests.experiments.helpers import config_dict, copy_tracking_db

pytestmark = pytest.mark.slow

TRACKS = ("personalized", "generalized")


def _csvs(folder) -> dict[str, np.ndarray]:
    return {p.stem: np.loadtxt(p, skiprows=1, ndmin=1) for p in sorted(folder.glob("*.csv"))}


@pytest.fixture(scope="module")
def swept(planted_store, tracking_dir, tmp_path_factory):
    """A CLI sweep of the small grid on the planted store: (tmp folder, tracking URI, client)."""
    tmp = tmp_path_factory.mktemp("saved")
    uri = copy_tracking_db(tracking_dir, tmp)
    cfg = tmp / "config.yaml"
    cfg.write_text(yaml.safe_dump(config_dict(uri, "saved")))
    code = main(["sweep", "--config", str(cfg), "--store", str(planted_store)])
    assert code == 0
    return tmp, uri, MlflowClient(uri, registry_uri=uri)


def test_the_sweep_registers_each_track_and_predict_gives_the_runs_predictions(
    swept, planted_store, capsys
):
    tmp, uri, client = swept
    for track in ("personalized", "generalized"):
        chosen = client.get_model_version_by_alias(f"saved-{track}", "chosen")
        run = client.get_run(chosen.run_id)
        assert run.data.tags["logged_model"] == "model"
        out = tmp / f"pred_{track}"
        args = ["--store", str(planted_store), "--tracking-uri", uri, "--out", str(out)]
        assert main(["predict", f"models:/saved-{track}@chosen", *args]) == 0
        predicted = _csvs(out)
        assert len(predicted) == 12  # every session of the store, the training ones too
        assert (out / "Subject_1_Story_3.csv").read_text().startswith("valence_self\n")
        for split in ("val", "test"):
            exported = tmp / f"export_{track}_{split}"
            code = main(
                [
                    "export",
                    chosen.run_id,
                    "--split",
                    split,
                    "--out",
                    str(exported),
                    "--tracking-uri",
                    uri,
                ]
            )
            assert code == 0
            for sid, logged in _csvs(exported).items():
                np.testing.assert_allclose(predicted[sid], logged, rtol=0, atol=1e-9, err_msg=sid)


def test_a_resumed_sweep_keeps_the_models_it_logged(swept, planted_store, capsys):
    tmp, uri, client = swept
    before = {t: client.get_model_version_by_alias(f"saved-{t}", "chosen") for t in TRACKS}
    capsys.readouterr()
    assert main(["sweep", "--config", str(tmp / "config.yaml"), "--store", str(planted_store)]) == 0
    out = capsys.readouterr().out
    for track in TRACKS:
        after = client.get_model_version_by_alias(f"saved-{track}", "chosen")
        assert (after.run_id, after.version) == (before[track].run_id, before[track].version)
        assert f"{track} model of run {after.run_id}: logged before" in out
    assert "fitted in" not in out


def test_save_refits_any_run_and_refuses_another_store(swept, planted_store, tmp_path, capsys):
    tmp, uri, client = swept
    exp = client.get_experiment_by_name("saved")
    runs = client.search_runs(
        [exp.experiment_id], "tags.track = 'personalized' and params.`model.name` = 'ridge'"
    )
    run_id = runs[0].info.run_id
    code = main(
        ["save", run_id, "--store", str(planted_store), "--tracking-uri", uri, "--register", "mine"]
    )
    assert code == 0
    assert "registered as mine version 1 (models:/mine@chosen)" in capsys.readouterr().out
    other = tmp_path / "other"
    shutil.copytree(planted_store, other)
    next(other.glob("*.h5")).unlink()
    assert main(["save", run_id, "--store", str(other), "--tracking-uri", uri]) == 2
    assert "fitted on another store" in capsys.readouterr().err
    # predicting another store with the model is allowed (what a model is for), and names no file twice
    out = tmp_path / "pred"
    args = ["--store", str(other), "--tracking-uri", uri, "--out", str(out)]
    assert main(["predict", "models:/mine@chosen", *args]) == 0
    assert len(list(out.glob("*.csv"))) == 11


def test_predict_refuses_a_store_without_the_models_channels(
    swept, planted_store, tmp_path, capsys
):
    import h5py

    tmp, uri, _ = swept
    bare = tmp_path / "bare"
    shutil.copytree(planted_store, bare)
    for h5 in bare.glob("*.h5"):
        with h5py.File(h5, "a") as f:
            del f["listener/egemaps"]
    args = ["--store", str(bare), "--tracking-uri", uri, "--out", str(tmp_path / "p")]
    assert main(["predict", "models:/saved-personalized@chosen", *args]) == 2
    err = capsys.readouterr().err
    assert "no channel listener/egemaps" in err, err
    assert not (tmp_path / "p").exists()
