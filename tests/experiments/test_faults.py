"""Bad input for ``experiments`` and the exit codes of every verb (0 all good, 1 some failed, 2 usage).

Kill-and-resume and two concurrent sweeps are in test_cli_sweep.py; an unknown config key in
test_cli_sweep.py and test_config.py. Here: a malformed YAML file, an empty store for
``ablate``, a shard of an older schema, one usage error / partial failure / success per verb,
and the tracking and store faults that end in one line (the stores refused at start are in
tracking/test_tracker.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from experiments.cli import main
from experiments.config.models import Domain, Hyper, ModelSpec, register_model, unregister_model
from experiments.data.dataset import DatasetError, load_sessions
from experiments.tracking.tracker import resolve_tracking_uri
from featurestore.storage.store import Store
from tests.experiments.helpers import (
    CHANNELS,
    LISTENERS,
    SPLITS,
    config_dict,
    free_port,
    smoke_sweep_args,
)

pytestmark = pytest.mark.integration


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("verb", ["sweep", "ablate"])
def test_malformed_yaml_exits_2_naming_file_and_line(planted_store, tmp_path, capsys, verb):
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: valence_self\nwindow:\n  lengths_s: [[4]\n  delay_s: [0]\nseed: 0\n")
    code = main(
        [
            verb,
            "--config",
            str(bad),
            "--store",
            str(planted_store),
            "--tracking-uri",
            str(tmp_path / "mlruns"),
            *(["--out", str(tmp_path / "reports")] if verb == "ablate" else []),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert (
        f"{bad}:4: malformed YAML" in err
        and "fix the syntax on that line" in err
        and "Traceback" not in err
    )
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "reports").exists()


def test_empty_store_for_ablate_exits_2_and_writes_nothing(tmp_path, capsys):
    empty = tmp_path / "features"
    empty.mkdir()
    for store, what in ((empty, f"no shards in {empty}"), (tmp_path / "missing", "no such folder")):
        code = main(
            [
                "ablate",
                "--config",
                "smoke",
                "--store",
                str(store),
                "--tracking-uri",
                str(tmp_path / "mlruns"),
                "--out",
                str(tmp_path / "reports"),
            ]
        )
        assert code == 2
        err = capsys.readouterr().err
        assert what in err and str(store) in err and "make features" in err
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "reports").exists()


def test_shard_of_an_older_schema_is_a_clear_sweep_error(
    planted_store, tracking_dir, tmp_path, capsys
):
    store = tmp_path / "features"
    shutil.copytree(planted_store, store)
    old = store / "Subject_2_Story_2.h5"
    with h5py.File(old, "a") as f:
        f.attrs["schema_version"] = 0
    before = files_of(store)
    code = main(
        [
            "sweep",
            "--no-models",
            "--config",
            "smoke",
            "--store",
            str(store),
            "--tracking-uri",
            tracking_dir,
            "--set",
            "tracking.experiment=old-schema",
            "--set",
            "feature_set=[listener]",
            "--set",
            "feature_sets.listener=[listener/face_geom]",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert (
        f"{old} has schema version 0" in err
        and "featurestore extract" in err
        and "Traceback" not in err
    )
    assert files_of(store) == before
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir))
    exp = client.get_experiment_by_name("old-schema")
    runs = client.search_runs([exp.experiment_id]) if exp else []
    assert not [r for r in runs if r.info.status == "RUNNING"]


# ------------------------------------------------------------------ exit codes of every verb
def write_config(path: Path, raw: dict) -> str:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


def _unchecked_ridge(params: dict, seed: int):
    from sklearn.linear_model import Ridge  # scikit-learn, as a builder imports it

    return Ridge(alpha=params["alpha"])


#: ridge without its alpha checked when a config loads: a negative alpha fails when it is fitted
UNCHECKED = ModelSpec(
    "ridge_unchecked",
    "scikit-learn `Ridge`, alpha unchecked",
    _unchecked_ridge,
    {"alpha": Hyper(1.0, Domain())},
    preprocess="impute_scale",
)


@pytest.fixture
def unchecked_ridge():
    register_model(UNCHECKED)
    yield UNCHECKED
    unregister_model(UNCHECKED.name)


def small_grid(uri: str, alphas: list[float], model: str = "ridge") -> dict:
    """dummy + ridge(alpha) on the listener set, global, no smoothing: about a second per configuration."""
    return config_dict(
        uri,
        "exit-codes",
        feature_set=["listener"],
        models=[{"name": model, "alpha": alphas}],
        personalization=["global"],
        postprocess={"smooth_s": [0], "rescale": ["none"]},
    )


def test_exit_codes_of_sweep_ablate_export_and_score(
    planted_store, tracking_dir, tmp_path, capsys, unchecked_ridge
):
    opts = ["--store", str(planted_store)]
    # sweep: usage errors (a misspelt key; a ridge alpha outside its domain, refused at load), then
    # a grid where one configuration fails (a negative alpha of a model that does not check it)
    assert (
        main(["sweep", "--no-models", "--config", "smoke", *opts, "--set", "window.dealy_s=[1]"])
        == 2
    )
    refused = write_config(tmp_path / "refused.yaml", small_grid(tracking_dir, [10, -1]))
    assert main(["sweep", "--no-models", "--config", refused, *opts]) == 2
    assert "models[0].alpha: expected a number >= 0, got -1" in capsys.readouterr().err
    grid = small_grid(tracking_dir, [10, -1], model=unchecked_ridge.name)
    failing = write_config(tmp_path / "failing.yaml", grid)
    assert main(["sweep", "--no-models", "--config", failing, *opts]) == 1
    captured = capsys.readouterr()
    assert (
        "1 failed" in captured.out
        and re.search(r"FAILED \S+ global ridge_unchecked .*\(alpha=-1\)", captured.err)
        and "alpha" in captured.err
    )
    good = write_config(
        tmp_path / "good.yaml", small_grid(tracking_dir, [10], unchecked_ridge.name)
    )
    assert main(["sweep", "--no-models", "--config", good, *opts]) == 0
    out = capsys.readouterr().out
    assert (
        "0 configurations run, 2 reused from earlier runs, 0 failed" in out
    )  # the resume keeps the good ones
    best = out.split("best child ")[1].split()[0]

    # ablate: same codes, reports written only when it ran
    reports = tmp_path / "reports"
    assert main(["ablate", "--config", good, *opts, "--out", str(reports), "--jobs", "0x"]) == 2
    assert not reports.exists()  # a usage error writes nothing
    assert main(["ablate", "--config", failing, *opts, "--out", str(reports)]) == 1
    assert main(["ablate", "--config", good, *opts, "--out", str(reports)]) == 0
    table = pd.read_csv(reports / "ablation.csv")
    assert sorted(zip(table.feature_set, table.split, strict=True)) == [
        ("listener", "test"),
        ("listener", "val"),
    ]
    assert table.ccc_generalized.notna().all()

    # export: a bad --split is a usage error, an unknown run a failure
    out_dir = tmp_path / "export"
    assert (
        main(
            [
                "export",
                best,
                "--split",
                "train",
                "--out",
                str(out_dir),
                "--tracking-uri",
                tracking_dir,
            ]
        )
        == 2
    )
    assert (
        main(
            [
                "export",
                "f" * 32,
                "--split",
                "test",
                "--out",
                str(out_dir),
                "--tracking-uri",
                tracking_dir,
            ]
        )
        == 1
    )
    assert (
        main(
            [
                "export",
                best,
                "--split",
                "test",
                "--out",
                str(out_dir),
                "--tracking-uri",
                tracking_dir,
            ]
        )
        == 0
    )

    # score: a missing folder is a usage error, a missing prediction a failure
    truth = tmp_path / "truth"
    truth.mkdir()
    st = Store(planted_store)
    for listener in LISTENERS:
        for story in SPLITS["test"]:
            sid = f"Subject_{listener}_Story_{story}"
            np.savetxt(
                truth / f"{sid}.csv",
                st.labels(sid).to_numpy(),
                fmt="%.9g",
                header="valence",
                comments="",
            )
    assert main(["score", str(truth), str(tmp_path / "nowhere")]) == 2
    partial = tmp_path / "partial"
    shutil.copytree(out_dir, partial)
    next(partial.glob("*.csv")).unlink()
    assert main(["score", str(truth), str(partial)]) == 1
    assert "1 predictions missing" in capsys.readouterr().err
    assert main(["score", str(truth), str(out_dir)]) == 0


# ------------------------------------------------------------------ tracking and store faults, one line each
def one_line(err: str, *words: str) -> None:
    lines = [line for line in err.splitlines() if ": note: " not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]


def test_tracking_faults_end_in_one_line_within_seconds(planted_store, tmp_path, capsys):
    not_db = tmp_path / "mlruns" / "mlflow.db"
    not_db.parent.mkdir()
    not_db.write_text("not a database\n")
    server = f"http://127.0.0.1:{free_port()}"
    sweep = smoke_sweep_args(planted_store, "--tracking-uri")
    export = ["export", "f" * 32, "--split", "test", "--out", str(tmp_path / "x"), "--tracking-uri"]
    cases = [
        (sweep + [str(not_db.parent)], [str(not_db), "not an SQLite database"]),
        (sweep + [server], [server, "cannot reach"]),
        (export + [server], [server, "cannot reach"]),
        (sweep + [f"mysql://u@127.0.0.1:{free_port()}/db"], ["pip install"]),
    ]
    for argv, words in cases:
        started = time.monotonic()
        assert main(argv) == 1
        assert time.monotonic() - started < 30  # the bound; today 2-10 s
        one_line(capsys.readouterr().err, f"experiments {argv[0]}: ", *words)
    assert not (tmp_path / "x").exists()


def test_export_out_a_file_and_a_store_that_is_a_file_are_one_line(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    argv = ["export", "f" * 32, "--split", "test", "--out", str(a_file)]
    assert main([*argv, "--tracking-uri", str(tmp_path / "mlruns")]) == 2
    one_line(capsys.readouterr().err, f"--out {a_file} is a file")
    from featurestore.cli import main as featurestore_main

    assert (
        featurestore_main(["labels", "--target", "v", "--store", str(a_file), str(tmp_path)]) == 1
    )
    one_line(capsys.readouterr().err, f"feature store {a_file} is a file")


def test_the_environments_tracking_uri_is_used_under_the_flag(tmp_path, capsys, monkeypatch):
    server = f"http://user:secret@127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    argv = ["export", "f" * 32, "--split", "test", "--out", str(tmp_path / "x")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "note: tracking to MLFLOW_TRACKING_URI=http://user:***@127.0.0.1" in err
    one_line(err, "cannot reach")
    assert "secret" not in err
    assert main([*argv, "--tracking-uri", str(tmp_path / "mlruns")]) == 1  # the flag wins
    err = capsys.readouterr().err
    assert "MLFLOW_TRACKING_URI" not in err and "no run ffff" in err


def test_a_shard_deleted_while_a_sweep_loads_is_named(planted_store, tmp_path, monkeypatch):
    store = tmp_path / "features"
    shutil.copytree(planted_store, store)
    names = Store(store).list_sessions()
    (store / f"{names[-1]}.h5").unlink()  # after the store was listed
    with pytest.raises(DatasetError, match=f"no shard for {names[-1]} in {store}"):
        load_sessions(store, CHANNELS, sessions=names, cache=False)
    # between the reader's check that it exists and its open: too short a window to hit by
    # chance, so the real file is deleted by the open itself
    gone, real_open = store / f"{names[0]}.h5", h5py.File

    def deleted_first(name, *args, **kwargs):
        if Path(name) == gone:
            gone.unlink(missing_ok=True)
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", deleted_first)
    with pytest.raises(DatasetError, match=f"shard {gone} was deleted while the store was read"):
        load_sessions(store, CHANNELS, sessions=names[:-1], cache=False)


def test_a_reader_closing_the_pipe_ends_either_command_quietly(planted_store, tmp_path):
    truth = tmp_path / "truth"
    truth.mkdir()
    (truth / "Subject_1_Story_1.csv").write_text("valence\n0.1\n0.2\n0.3\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    for module, argv in (
        ("featurestore.cli", ["inspect", "Subject_1_Story_1", "--store", str(planted_store)]),
        ("experiments.cli", ["score", str(truth), str(truth)]),
    ):
        cmd = [sys.executable, "-m", module, *argv]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        proc.stdout.close()  # the reader is gone before the command writes (`| head -0`)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 141 and err == b"", (module, proc.returncode, err[-500:])
