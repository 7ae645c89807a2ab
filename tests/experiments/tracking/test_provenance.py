"""Runs you can trust: the code fingerprint (package source and library versions) in every resume
key and on every run, and Dask workers that run other code or other library versions refused."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from experiments.studies.sweep import SweepOptions
from experiments.tracking import provenance
from experiments.tracking.provenance import (
    LIBRARIES,
    PACKAGES,
    code_version,
    parse_libraries,
    source_fingerprint,
)
from tests.experiments.helpers import ROOT, cli_env, config_dict

DEFAULT_LINE = "CALIBRATION_SHRINKAGE = 100.0"  # a default of experiments/evaluation/fitting.py


def copy_packages(dest: Path) -> Path:
    """A copy of the two packages' source (what the fingerprint covers) under ``dest``."""
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return dest


def change_default(root: Path) -> None:
    path = root / "experiments" / "evaluation" / "fitting.py"
    text = path.read_text()
    assert DEFAULT_LINE in text, (
        "the test's default moved: pick another line of experiments/evaluation/fitting.py"
    )
    path.write_text(text.replace(DEFAULT_LINE, "CALIBRATION_SHRINKAGE = 50.0"))


def test_fingerprint_covers_the_package_source_and_nothing_else(tmp_path):
    root = copy_packages(tmp_path)
    before = source_fingerprint(root, version="1")
    assert source_fingerprint(root, version="1") == before
    (root / "README.md").write_text("docs change nothing")
    (root / "experiments" / "__pycache__").mkdir(exist_ok=True)
    (root / "experiments" / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    assert source_fingerprint(root, version="1") == before
    assert source_fingerprint(root, version="2") != before  # another installed version
    change_default(root)
    assert source_fingerprint(root, version="1") != before
    (root / "experiments" / "configs" / "smoke.yaml").write_text("seed: 1\n")
    v = code_version()
    assert v.fingerprint == source_fingerprint()
    assert v.git_dirty in (True, False, None) and v.git_commit


def test_fingerprint_covers_the_library_versions(tmp_path):
    root = copy_packages(tmp_path)
    libs = provenance.library_versions()
    assert [name for name, _ in libs] == list(LIBRARIES)
    assert dict(libs)["scikit-learn"] == __import__("sklearn").__version__
    before = source_fingerprint(root, version="1", libraries=libs)
    assert source_fingerprint(root, version="1") == before  # the installed versions by default
    for i, (name, _) in enumerate(libs):
        other = libs[:i] + ((name, "0.0.1"),) + libs[i + 1 :]
        assert source_fingerprint(root, version="1", libraries=other) != before, name
    tag = code_version().tags()["library_versions"]
    assert parse_libraries(tag) == dict(libs) and tag.startswith("numpy=")


def sweep(root: Path, config: Path, store: Path, *extra: str) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.cli",
            "sweep",
            "--no-models",
            "--config",
            str(config),
            "--store",
            str(store),
            *extra,
        ],
        cwd=root,
        env={**cli_env(), "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.integration  # four sweeps in subprocesses, each importing the whole stack
def test_a_changed_default_is_recomputed_not_reused(planted_store, tmp_path):
    """The same configuration, the same store: reused by the same code; computed again once a
    default in the package's source changed (or with --no-resume)."""
    root = copy_packages(tmp_path / "code")
    config = tmp_path / "small.yaml"
    config.write_text(
        yaml.safe_dump(
            config_dict(
                str(tmp_path / "mlruns"),
                "resume-by-code",
                feature_set=["listener"],
                personalization=["global_calibrated"],
                postprocess={"smooth_s": [0], "rescale": ["none"]},
            )
        )
    )
    first = sweep(root, config, planted_store)
    assert "2 configurations run, 0 reused" in first
    assert "0 configurations run, 2 reused" in sweep(root, config, planted_store)
    assert "2 configurations run, 0 reused" in sweep(root, config, planted_store, "--no-resume")
    change_default(root)
    assert "2 configurations run, 0 reused" in sweep(root, config, planted_store)
    runs = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}").search_runs(
        [
            MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
            .get_experiment_by_name("resume-by-code")
            .experiment_id
        ],
        "tags.sweep = 'parent'",
    )
    fingerprints = {r.data.tags["code_fingerprint"] for r in runs}
    assert len(runs) == 4 and len(fingerprints) == 2  # the edited code is another fingerprint
    assert {r.data.tags["git_dirty"] for r in runs} == {"unknown"}  # a copy outside git


def test_other_library_versions_are_recomputed_not_reused(planted_store, tracking_dir, monkeypatch):
    """The same code and store: reused while the libraries are the same; computed again once
    scikit-learn reports another version (an upgrade), the run tagged with that version."""
    from experiments.config.loading import from_dict
    from experiments.studies.sweep import run_sweep
    from experiments.tracking.tracker import resolve_tracking_uri

    cfg = from_dict(
        config_dict(
            tracking_dir,  # a database that exists already; this experiment's name is its own
            "resume-by-libraries",
            feature_set=["listener"],
            personalization=["global_calibrated"],
            postprocess={"smooth_s": [0], "rescale": ["none"]},
        )
    )

    def statuses() -> list[str]:
        res = run_sweep(
            cfg, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
        )
        return sorted(res.table["status"])

    real = dict(provenance.library_versions())
    code_version.cache_clear()
    try:
        assert statuses() == ["done", "done"]
        assert statuses() == ["reused", "reused"]
        monkeypatch.setattr(
            provenance,
            "library_versions",
            lambda: tuple((n, "0.0.1" if n == "scikit-learn" else v) for n, v in real.items()),
        )
        code_version.cache_clear()
        assert statuses() == ["done", "done"]  # another scikit-learn: not this run's numbers
        assert statuses() == ["reused", "reused"]
    finally:
        monkeypatch.undo()
        code_version.cache_clear()
    client = MlflowClient(resolve_tracking_uri(tracking_dir))
    experiment = client.get_experiment_by_name("resume-by-libraries").experiment_id
    children = client.search_runs([experiment], "tags.config_hash != ''")
    sklearn = {parse_libraries(r.data.tags["library_versions"])["scikit-learn"] for r in children}
    assert len(children) == 4 and sklearn == {real["scikit-learn"], "0.0.1"}


def test_runs_record_the_code_and_every_resolved_parameter(sweep_once, tmp_path):
    cfg, res, uri = sweep_once
    client = MlflowClient(tracking_uri=uri)
    mine = code_version().tags()
    parent = client.get_run(res.parent_run_id)
    assert {k: parent.data.tags[k] for k in mine} == mine
    at_parent = yaml.safe_load(
        open(client.download_artifacts(parent.info.run_id, "config.yaml", str(tmp_path)))
    )
    assert (
        at_parent["code"] == mine and at_parent["config"]["postprocess"]["fit_on"] == "out_of_fold"
    )
    # the best per-listener run (the tracks nest: the personalized pick may be a global model)
    t = res.table
    per_listener = t[(t.status == "done") & (t["personalization"] == "per_listener")]
    child = client.get_run(per_listener.sort_values("val.ccc_personalized").run_id.iloc[-1])
    assert {k: child.data.tags[k] for k in mine} == mine
    written = yaml.safe_load(
        open(client.download_artifacts(child.info.run_id, "config.yaml", str(tmp_path)))
    )
    resolved = written["resolved"]
    # scikit-learn's defaults that the config never names, and the evaluation's fixed settings
    assert resolved["estimator__model__alpha"] == "10" and "estimator__model__solver" in resolved
    assert resolved["min_samples"] == "50" and "evaluate.calibration_shrinkage" in resolved
    assert written["code"] == mine


@pytest.mark.integration
@pytest.mark.slow
def test_dask_workers_with_other_code_are_refused(tmp_path):
    """A worker started from another copy of the package (a changed default) is refused by name."""
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    from experiments.engine.dask import WorkerCodeMismatch, check_worker_code

    root = copy_packages(tmp_path)
    change_default(root)
    with LocalCluster(n_workers=0, dashboard_address=None) as cluster, Client(cluster) as client:
        check_worker_code(client)  # no worker yet: nothing to refuse
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                cluster.scheduler_address,
                "--nthreads",
                "1",
                "--no-dashboard",
            ],
            cwd=root,
            env={**cli_env(), "PYTHONPATH": str(root)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            client.wait_for_workers(1, timeout=60)
            (fingerprint,) = client.run(
                lambda: (
                    __import__("experiments.tracking.provenance")
                    .tracking.provenance.code_version()
                    .fingerprint
                )
            ).values()
            assert fingerprint == source_fingerprint(root) != code_version().fingerprint
            with pytest.raises(WorkerCodeMismatch, match="run other code than this client"):
                check_worker_code(client)
            cluster.scale(1)  # a worker of this code beside it: still refused, the other one named
            client.wait_for_workers(2, timeout=60)
            with pytest.raises(WorkerCodeMismatch) as refused:
                check_worker_code(client)
            assert str(refused.value).count(fingerprint) == 1
        finally:
            worker.terminate()
            worker.wait(timeout=30)


@pytest.mark.slow
def test_dask_workers_with_other_library_versions_are_refused(tmp_path):
    """A worker on the same package source whose scikit-learn reports another version is refused,
    the message naming scikit-learn and both versions."""
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    from experiments.engine.dask import WorkerCodeMismatch, check_worker_code

    patch = tmp_path / "patch"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(
        "import importlib.metadata as m\n"
        "_real = m.version\n"
        "m.version = lambda name: '0.0.1' if name == 'scikit-learn' else _real(name)\n"
    )
    with LocalCluster(n_workers=0, dashboard_address=None) as cluster, Client(cluster) as client:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                cluster.scheduler_address,
                "--nthreads",
                "1",
                "--no-dashboard",
            ],
            cwd=ROOT,
            env={**cli_env(), "PYTHONPATH": f"{patch}:{ROOT}"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            client.wait_for_workers(1, timeout=60)
            with pytest.raises(WorkerCodeMismatch) as refused:
                check_worker_code(client)
            here = dict(code_version().libraries)["scikit-learn"]
            assert f"scikit-learn 0.0.1 (here {here})" in str(refused.value)
            assert "numpy" not in str(refused.value)  # only the differing library is named
        finally:
            worker.terminate()
            worker.wait(timeout=30)
