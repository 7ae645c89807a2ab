"""A lab's MLflow setup for real: PostgreSQL behind ``make mlflow-server``, Dask workers logging through it.

What docs/scaling.md's "MLflow with many writers" section tells a lab to do, on one machine: a
throw-away PostgreSQL cluster (Debian's ``postgresql`` package: ``initdb`` + ``pg_ctl`` on a
free local port, as a non-root user because PostgreSQL refuses root; password authentication,
the password given to the server as ``PGPASSWORD``, never in the URI), ``make mlflow-server
TRACKING=postgresql://...`` on it, a local Dask cluster of 2 workers, and the ``experiments
sweep --backend dask --tracking-uri http://...`` command, run twice: one worker is killed
while it logs a child run, the re-run completes the sweep.

Dask's retries are off here (``allowed-failures`` 0), so the killed worker's configuration
fails in the first sweep and the re-run has to finish it; with Dask's default retries the
task runs again elsewhere within the same sweep (``test_distributed``).

Skipped with the reason where PostgreSQL's server programs, the database driver or ``make``
are missing (``.ci/run`` installs ``postgresql``) or the cluster cannot be started.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from experiments.config.loading import expand, from_dict
from experiments.tracking.tracker import CONFIG_HASH_TAG, WORKER_LOST_TAG
from tests.experiments.helpers import (
    ROOT,
    assert_same_metrics,
    cli_cmd,
    cli_env,
    config_dict,
    dask_cluster,
    free_port,
    process_group,
    running_children,
    wait_healthy,
)

psycopg = pytest.importorskip(
    "psycopg", reason="needs the PostgreSQL driver (pip install -e '.[lab]')"
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow]

EXPERIMENT = "lab-postgres"


def postgres_bindir() -> Path | None:
    """Folder of PostgreSQL's server programs (``initdb``, ``pg_ctl``): Debian's newest
    ``/usr/lib/postgresql/<version>/bin``, else the ``PATH``'s; None when there are none."""

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.parent.name))

    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=version, reverse=True)
    found = [p.parent for p in debian if (p.parent / "pg_ctl").exists()]
    if not found and shutil.which("initdb") and shutil.which("pg_ctl"):
        found = [Path(shutil.which("initdb")).parent]
    return found[0] if found else None


@dataclass(frozen=True)
class Postgres:
    """A running throw-away PostgreSQL cluster: its superuser ``user`` owns the database ``db``."""

    host: str
    port: int
    user: str
    password: str
    db: str

    @property
    def uri(self) -> str:
        """The backend URI for MLflow, without the password (the driver reads ``PGPASSWORD``)."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.db}"

    def connect(self):
        return psycopg.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.db
        )


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[Postgres]:
    """``initdb`` + ``pg_ctl start`` into a temporary folder on a free port (127.0.0.1 only);
    stopped (immediate mode) and deleted at exit. Run as the ``postgres`` user (else ``nobody``)
    when this process is root, which PostgreSQL refuses to run as."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip(
            "needs PostgreSQL's server programs: apt-get install postgresql (.ci/run installs it)"
        )
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        owner = next((u for u in ("postgres", "nobody") if _user_exists(u)), None)
        if runuser is None or owner is None:
            pytest.skip(
                "running as root without runuser or a postgres/nobody user to run PostgreSQL as"
            )
        prefix = [runuser, "-u", owner, "--"]
    # /tmp, not pytest's folder: the server's user must reach it, and root's pytest folders are private
    folder = Path(tempfile.mkdtemp(prefix="omg-postgres-"))
    pg = Postgres("127.0.0.1", free_port(), "mlflow", os.urandom(12).hex(), "mlflow")
    (folder / "password").write_text(pg.password + "\n")
    if owner is not None:
        info = pwd.getpwnam(owner)
        for p in (folder, folder / "password"):
            os.chown(p, info.pw_uid, info.pw_gid)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*prefix, *args], capture_output=True, text=True, timeout=120, cwd=folder
        )

    data, log = folder / "data", folder / "postgres.log"
    options = (
        f"-c listen_addresses={pg.host} -p {pg.port} -k {folder} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    )  # a throw-away cluster
    started = False
    try:
        init = run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            pg.user,
            f"--pwfile={folder / 'password'}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        )
        if init.returncode != 0:
            pytest.skip(f"initdb failed: {(init.stderr or init.stdout)[-1000:]}")
        start = run(
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(log),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        )
        started = start.returncode == 0
        if not started:
            tail = log.read_text()[-1000:] if log.exists() else ""
            pytest.skip(f"PostgreSQL did not start: {(start.stderr or start.stdout)[-500:]} {tail}")
        with psycopg.connect(
            host=pg.host,
            port=pg.port,
            user=pg.user,
            password=pg.password,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute(f'CREATE DATABASE "{pg.db}"')
        yield pg
    finally:
        if started:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def mlflow_server_command(backend_uri: str, artifacts: Path, port: int) -> list[str]:
    """``make mlflow-server`` for this backend, artifact folder and port, with this Python's tools."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("needs make")
    # -o install: the environment is there already (never pip install inside a test)
    return [
        make,
        "-s",
        "-C",
        str(ROOT),
        "-o",
        "install",
        "mlflow-server",
        f"TRACKING={backend_uri}",
        f"ARTIFACTS={artifacts}",
        f"MLFLOW_PORT={port}",
        f"BIN={Path(sys.executable).parent}",
    ]


def worker_pids(cluster) -> set[int]:
    from distributed import Client

    with Client(cluster) as client:
        return set(client.run(os.getpid).values())


def kill_a_worker_while_it_logs(
    sweep: subprocess.Popen, client: MlflowClient, cluster, attempts: int = 3
):
    """While ``sweep`` runs, SIGKILL the Dask worker logging a (non-baseline) child run of
    :data:`EXPERIMENT` (found RUNNING on the server, the worker's pid in the run's ``pid`` tag). Returns
    ``(run id, pid)`` of the run left RUNNING by the kill, or None.

    Only the cluster's worker processes are ever signalled. A kill that lands just after the
    run finished orphans nothing; then another worker is killed (``attempts`` in all).
    """
    pids = worker_pids(cluster)
    tried: set[str] = set()
    while sweep.poll() is None and len(tried) < attempts:
        running = running_children(client, EXPERIMENT)
        # past the baselines (logged first, alone): the kill lands in the middle of the sweep
        target = next(
            (
                r
                for r in running
                if r.info.run_id not in tried
                and int(r.data.tags.get("pid", 0)) in pids
                and not r.info.run_name.startswith("dummy")
            ),
            None,
        )
        if target is None:
            time.sleep(0.02)
            continue
        pid = int(target.data.tags["pid"])
        os.kill(pid, signal.SIGKILL)
        tried.add(target.info.run_id)
        time.sleep(1.0)  # a request already on its way would land by now
        if client.get_run(target.info.run_id).info.status == "RUNNING":
            return target.info.run_id, pid
        pids = worker_pids(cluster)  # the nanny restarted the killed worker under a new pid
    return None


def test_lab_sweep_on_postgres_survives_a_killed_worker(planted_store, local_reference, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cfg_dict = config_dict(url, EXPERIMENT)
    expected = {t.hash() for t in expand(from_dict(cfg_dict))}
    config = tmp_path / "lab.yaml"
    config.write_text(yaml.safe_dump(cfg_dict, sort_keys=False))
    artifacts = tmp_path / "artifacts"
    with throwaway_postgres() as pg:
        server_env = {**os.environ, "PGPASSWORD": pg.password, "MLFLOW_DISABLE_TELEMETRY": "true"}
        with (
            process_group(
                mlflow_server_command(pg.uri, artifacts, port),
                tmp_path / "server.log",
                env=server_env,
            ) as server,
            dask_cluster(2, allowed_failures=0) as cluster,
        ):
            assert cluster.scheduler.allowed_failures == 0
            wait_healthy(url, server, log=tmp_path / "server.log")
            sweep = cli_cmd(
                "sweep",
                "--config",
                str(config),
                "--store",
                str(planted_store),
                "--backend",
                "dask",
                "--scheduler",
                cluster.scheduler_address,
                "--tracking-uri",
                url,
            )
            client = MlflowClient(tracking_uri=url)

            # 1. one worker is killed while it logs a child run through the server
            with open(tmp_path / "first.log", "w") as out:
                first = subprocess.Popen(
                    sweep, env=cli_env(), cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
                )
                try:
                    orphan = kill_a_worker_while_it_logs(first, client, cluster)
                    first.wait(timeout=300)
                finally:
                    if first.poll() is None:
                        first.kill()
            text = (tmp_path / "first.log").read_text()
            assert orphan is not None, (
                f"no worker was killed while its child run was RUNNING:\n{text[-3000:]}"
            )
            assert first.returncode == 1 and "KilledWorker" in text, text[-3000:]
            run_id, pid = orphan
            lost = client.get_run(run_id)
            assert lost.info.status == "KILLED"
            assert f"pid {pid}" in lost.data.tags[WORKER_LOST_TAG]
            assert (
                "a resumed sweep runs this configuration again" in lost.data.tags[WORKER_LOST_TAG]
            )

            # 2. the same command again completes the sweep
            second = subprocess.run(
                sweep, env=cli_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300
            )
            assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
            assert re.search(
                r"sweep summary: [1-9]\d* configurations run, \d+ reused from earlier runs, 0 failed",
                second.stdout,
            )

            exp = client.get_experiment_by_name(EXPERIMENT)
            runs = client.search_runs([exp.experiment_id], max_results=1000)
            children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
            finished = [r for r in children if r.info.status == "FINISHED"]
            assert not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
            assert {r.info.status for r in children} <= {"FINISHED", "FAILED", "KILLED"}
            # every configuration logged exactly once, by the workers
            once = Counter(r.data.tags[CONFIG_HASH_TAG] for r in finished)
            assert set(once) == expected and set(once.values()) == {1}, once
            # the re-run (the newer parent) finished what the kill cost
            rerun = max(
                (r for r in runs if "mlflow.parentRunId" not in r.data.tags),
                key=lambda r: r.info.start_time,
            )
            redone = next(
                r
                for r in finished
                if r.data.tags[CONFIG_HASH_TAG] == lost.data.tags[CONFIG_HASH_TAG]
            )
            assert redone.data.tags["mlflow.parentRunId"] == rerun.info.run_id
            assert not {int(r.data.tags["pid"]) for r in finished} & {first.pid, os.getpid()}
            # the same metrics per configuration as the processes backend
            table = pd.DataFrame(
                [
                    {
                        CONFIG_HASH_TAG: r.data.tags[CONFIG_HASH_TAG],
                        "label": r.info.run_name,
                        **r.data.metrics,
                    }
                    for r in finished
                ]
            )
            assert_same_metrics(table, local_reference)
            # the runs are in PostgreSQL, their artifacts went through the server into ARTIFACTS
            with pg.connect() as conn:
                n = conn.execute(
                    "SELECT count(*) FROM runs WHERE experiment_id = %s", (int(exp.experiment_id),)
                ).fetchone()[0]
            assert n == len(runs)
            assert {"config.yaml", "ccc_matrix.csv", "predictions", "plots"} <= {
                a.path for a in client.list_artifacts(finished[0].info.run_id)
            }
            assert len(list(artifacts.rglob("ccc_matrix.csv"))) >= len(finished)
