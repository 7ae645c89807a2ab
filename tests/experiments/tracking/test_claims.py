"""Many writers on one tracking database: sweeps of one experiment started together log each
configuration once (claims, :mod:`experiments.tracking.claims`), on SQLite and on a fresh
PostgreSQL database whose tables they race to create."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from experiments.config.loading import expand, from_dict
from experiments.tracking.tracker import CONFIG_HASH_TAG, resolve_tracking_uri
from tests.experiments.helpers import cli_cmd, cli_env, config_dict

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SUMMARY = re.compile(
    r"sweep summary: (\d+) configurations run, (\d+) reused from earlier runs, 0 failed"
)


def start_sweeps(
    config: Path, store: Path, cwd: Path, n: int, *extra: str
) -> list[subprocess.Popen]:
    """``n`` processes of ``experiments sweep`` on ``config`` started at once."""
    return [
        subprocess.Popen(
            cli_cmd("sweep", "--config", str(config), "--store", str(store), *extra),
            cwd=cwd,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]


def finish_all(procs: list[subprocess.Popen], timeout_s: float = 600) -> list[tuple[str, str]]:
    """(stdout, stderr) of each process; every one must exit 0."""
    outs = [p.communicate(timeout=timeout_s) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-2000:] + err[-3000:]
    return outs


def assert_each_configuration_once(
    client: MlflowClient, experiment: str, expected: set[str]
) -> None:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert all(r.info.status == "FINISHED" for r in runs), [r.info.status for r in runs]
    logged = Counter(r.data.tags[CONFIG_HASH_TAG] for r in children)
    assert set(logged) == expected and set(logged.values()) == {1}, logged


def test_two_sweeps_of_one_experiment_at_once_on_sqlite(planted_store, tmp_path):
    """Two processes sweep the same grid into one SQLite database at once: each configuration is
    run and logged by one of them; the other reuses its run, so both report all of them."""
    folder = tmp_path / "mlruns"
    raw = config_dict(str(folder), "claimed")
    expected = {t.hash() for t in expand(from_dict(raw))}
    config = tmp_path / "grid.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    outs = finish_all(start_sweeps(config, planted_store, tmp_path, 2))
    counts = [tuple(map(int, SUMMARY.search(out).groups())) for out, _ in outs]  # type: ignore[union-attr]
    assert sum(run for run, _ in counts) == len(expected), counts
    assert all(run + reused == len(expected) for run, reused in counts), counts
    client = MlflowClient(tracking_uri=resolve_tracking_uri(str(folder)))
    assert_each_configuration_once(client, "claimed", expected)
    assert not list((folder / "claims").rglob("*")) or not [
        p for p in (folder / "claims").rglob("*") if p.is_file()
    ]  # every claim given back


def test_four_sweeps_at_once_on_a_fresh_postgres_database(planted_store, tmp_path):
    """Four sweeps started together on an empty PostgreSQL database (the URI holding the password):
    all exit 0 (one creates MLflow's tables while the others wait), each configuration is
    logged once, the artifacts are in ``tracking.artifacts`` and the password is nowhere."""
    pytest.importorskip("psycopg", reason="needs the PostgreSQL driver (pip install -e '.[lab]')")
    from tests.experiments.tracking.test_postgres import throwaway_postgres

    work = tmp_path / "work"  # the sweeps' working folder: no mlruns/ may appear in it
    work.mkdir()
    artifacts = tmp_path / "artifacts"
    with throwaway_postgres() as pg:
        uri = f"postgresql://{pg.user}:{pg.password}@{pg.host}:{pg.port}/{pg.db}"
        raw = config_dict(uri, "pg-claimed")
        raw["tracking"]["artifacts"] = str(artifacts)
        expected = {t.hash() for t in expand(from_dict(raw))}
        config = tmp_path / "grid.yaml"
        config.write_text(yaml.safe_dump(raw, sort_keys=False))
        outs = finish_all(start_sweeps(config, planted_store, work, 4))
        client = MlflowClient(tracking_uri=uri)
        assert_each_configuration_once(client, "pg-claimed", expected)
        assert not (work / "mlruns").exists()
        assert len(list(artifacts.rglob("ccc_matrix.csv"))) == len(expected)
        stored = "".join(p.read_text() for p in artifacts.rglob("config.yaml"))
        assert "tracking" in stored and f"{pg.user}:***@" in stored
        shown = stored + "".join(out + err for out, err in outs)
        # a new experiment on the database with nowhere for its artifacts: refused, masked
        bare = tmp_path / "no-artifacts.yaml"
        bare.write_text(yaml.safe_dump(config_dict(uri, "pg-no-artifacts"), sort_keys=False))
        refused = subprocess.run(
            cli_cmd("sweep", "--config", str(bare), "--store", str(planted_store)),
            cwd=work, env=cli_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        shown += refused.stdout + refused.stderr
        export = subprocess.run(
            cli_cmd("export", "0" * 32, "--split", "val", "--out", str(tmp_path / "x"),
                    "--tracking-uri", uri),
            cwd=work, env=cli_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert export.returncode != 0 and "no run" in export.stderr, export.stderr[-2000:]
        shown += export.stdout + export.stderr
        for run in client.search_runs([client.get_experiment_by_name("pg-claimed").experiment_id]):
            shown += str(run.data.params) + str(run.data.tags)
    assert refused.returncode != 0 and "tracking.artifacts" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and not (work / "mlruns").exists()
    assert pg.password not in shown
