"""MLflow tracking: an explicit URI, one experiment per config, a parent and nested child runs, resume
(docs/results.md, The MLflow runs in detail; docs/design.md#mlflow-runs). Every client call retries on SQLite's
``database is locked``; a store that cannot be used is refused at start in one line (:func:`check_tracking`);
MLflow is imported only where a run is logged or read."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from featurestore.files import file_lock
from featurestore.processes import pid_alive

from ..errors import ExperimentsError
from .redact import mask_uri
from .ui_view import experiment_tags

T = TypeVar("T")

DEFAULT_URI = "mlruns"
CONFIG_HASH_TAG = "config_hash"
#: tag of a child run marked KILLED because the process logging it was lost (its text says which)
WORKER_LOST_TAG = "worker_lost"


def resolve_tracking_uri(uri: str | None = None, base: str | os.PathLike | None = None) -> str:
    """The config's ``tracking.uri`` as a URI MLflow accepts: a folder -> ``sqlite:///<folder>/mlflow.db`` (created,
    relative to ``base``, default the working directory), a ``.db`` path -> that file, a URI unchanged."""
    uri = uri or DEFAULT_URI
    if "://" in uri:
        return uri
    path = Path(uri)
    if not path.is_absolute():
        path = Path(base or Path.cwd()) / path
    if path.suffix != ".db":
        path = path / "mlflow.db"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TrackingError(
            f"tracking folder {path.parent}: cannot create it ({e.strerror}); pass --tracking-uri "
            "a folder you can write"
        ) from e
    return f"sqlite:///{path.resolve()}"


class TrackingError(ExperimentsError):
    """A tracking store that cannot be used: the message names its URI or file and what to do."""


#: seconds a sweep waits at start for another writer's lock on a SQLite database
LOCK_WAIT_S = 60.0
#: seconds to reach a tracking server or database before it is called unreachable
CONNECT_TIMEOUT_S = 5.0
#: MLflow's HTTP retries and timeout, bounded for this process unless the environment sets them
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
#: the pip package of a database driver, where its module's name is not it
DRIVER_PACKAGES = {"MySQLdb": "mysqlclient", "psycopg2": "psycopg2-binary"}


def _check_sqlite(db: Path, write: bool) -> None:
    """Refuse a database file that is not SQLite or is read-only; wait (saying so) for another writer's lock."""
    if not db.exists():
        if not os.access(db.parent, os.W_OK):
            raise TrackingError(
                f"tracking folder {db.parent} is read-only: pass --tracking-uri a folder you can write"
            )
        return
    mode = "rw" if write and os.access(db, os.W_OK) and os.access(db.parent, os.W_OK) else "ro"
    if write and mode == "ro":
        raise TrackingError(
            f"tracking database {db} (or its folder) is read-only: make both writable, or pass "
            "--tracking-uri another folder"
        )
    probe = "BEGIN IMMEDIATE" if write else "SELECT count(*) FROM sqlite_master"
    for timeout in (0.0, LOCK_WAIT_S):
        conn = sqlite3.connect(f"{db.as_uri()}?mode={mode}", uri=True, timeout=timeout)
        try:
            conn.execute(probe)
            return
        except sqlite3.OperationalError as e:
            if not _is_locked_error(e):
                raise TrackingError(f"tracking database {db}: {e}; check the file") from e
            if timeout == 0.0:
                print(
                    f"tracking database {db} is locked by another writer; waiting (up to "
                    f"{LOCK_WAIT_S:.0f} s)",
                    file=sys.stderr,
                )
        except sqlite3.DatabaseError as e:
            raise TrackingError(
                f"tracking database {db} is not an SQLite database ({e}): move it away or pass "
                "--tracking-uri another folder"
            ) from e
        finally:
            conn.close()
    raise TrackingError(
        f"tracking database {db} stayed locked by another writer for {LOCK_WAIT_S:.0f} s: stop it "
        "or wait for it to finish, then re-run (a sweep resumes)"
    )


def _check_server(uri: str) -> None:
    """Refuse a database URI whose driver is missing, and a server or database that cannot be reached."""
    from sqlalchemy.engine import make_url  # with mlflow: see the module docstring

    shown = mask_uri(uri)
    scheme = uri.split("://", 1)[0].lower()
    host: str | None
    port: int | None
    if scheme in ("http", "https"):
        parts = urlsplit(uri)
        host, port = parts.hostname, parts.port or (443 if scheme == "https" else 80)
    elif scheme.startswith(("postgres", "mysql", "mssql")):
        url = make_url(uri.replace("postgres://", "postgresql://", 1))
        try:
            url.get_dialect().import_dbapi()
        except ModuleNotFoundError as e:
            package = DRIVER_PACKAGES.get(str(e.name), str(e.name))
            raise TrackingError(
                f"tracking.uri {shown}: its driver {e.name} is not installed: pip install {package} "
                "(or log through an MLflow server and pass its http:// URI)"
            ) from e
        default_port = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
        host, port = url.host, url.port or default_port.get(url.get_backend_name())
    else:
        return
    if not host or not port:  # a Unix socket: the driver reports it
        return
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise TrackingError(
            f"tracking.uri {shown}: cannot reach {host}:{port} ({e.strerror or e}); start that "
            "server (or check the address), or pass another --tracking-uri"
        ) from e


def check_tracking(uri: str, write: bool = True) -> None:
    """:class:`TrackingError` unless the resolved ``uri`` can be used: a file that is not a
    database, one read-only with ``write``, locked past :data:`LOCK_WAIT_S`, a driver missing, a
    server or database unreachable; MLflow's HTTP retries bounded (:data:`HTTP_LIMITS`)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    for key, value in HTTP_LIMITS.items():
        os.environ.setdefault(key, value)
    if uri.startswith("sqlite:///"):
        _check_sqlite(Path(uri[len("sqlite:///") :]), write)
    else:
        _check_server(uri)


def tracking_client(uri: str, write: bool = True) -> Any:
    """An ``MlflowClient`` of the resolved ``uri``, checked first (:func:`check_tracking`)."""
    check_tracking(uri, write)
    from mlflow import MlflowClient  # mlflow: see the module docstring

    return MlflowClient(tracking_uri=uri)


def artifact_root_for(uri: str) -> str | None:
    """Artifact folder beside a SQLite database (``<folder>/artifacts``); None for servers."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///") :])
        return (db.parent / "artifacts").resolve().as_uri()
    return None


def _is_locked_error(e: BaseException) -> bool:
    text = str(e).lower()
    return "database is locked" in text or "database table is locked" in text


def with_retry(fn: Callable[[], T], attempts: int = 40, first_wait_s: float = 0.05) -> T:
    """Call ``fn``, retrying with backoff (up to ~60 s in all) while SQLite reports a lock;
    :class:`TrackingError` when it is still held."""
    wait = first_wait_s
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:  # MlflowException, SQLAlchemy's OperationalError: unless a lock
            if not _is_locked_error(e):
                raise
            if i == attempts - 1:
                raise TrackingError(
                    "the tracking database stayed locked by another writer for a minute: stop it "
                    "or wait for it to finish, then re-run (a sweep resumes)"
                ) from e
            time.sleep(wait)
            wait = min(wait * 1.5, 2.0)
    raise AssertionError("unreachable")


class ArtifactLocationError(ExperimentsError, ValueError):
    """A new experiment on a database with nowhere configured for its artifacts."""


#: the PostgreSQL advisory lock key every writer takes while MLflow creates or upgrades its tables
SCHEMA_LOCK_KEY = 0x6F6D67_5343  # "omg" "SC"


@contextlib.contextmanager
def postgres_advisory_lock(uri: str, key: int) -> Iterator[None]:
    """Hold PostgreSQL's session advisory lock ``key`` on the database of ``uri`` for the block."""
    import sqlalchemy  # with mlflow: see the module docstring

    engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
    finally:
        engine.dispose()


def schema_lock(uri: str) -> contextlib.AbstractContextManager[object]:
    """The lock around creating tables and an experiment: a file lock (SQLite), an advisory lock (PostgreSQL)."""
    if uri.startswith("sqlite:///"):
        return file_lock(Path(uri[len("sqlite:///") :]).with_suffix(".lock"))
    if uri.split("://", 1)[0].lower().startswith("postgres"):
        return postgres_advisory_lock(uri, SCHEMA_LOCK_KEY)
    return contextlib.nullcontext()


def artifact_location(uri: str, experiment: str, artifacts: str | None = None) -> str | None:
    """Where a new experiment's artifacts go (None: the server decides); refused for a database without any."""
    if artifacts:
        root = artifacts if "://" in artifacts else Path(artifacts).resolve().as_uri()
        return f"{root.rstrip('/')}/{experiment}"
    if beside := artifact_root_for(uri):
        return f"{beside}/{experiment}"
    # a database MLflow writes directly (PostgreSQL, MySQL, ...), not SQLite, a folder or a server
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme and not scheme.startswith(("sqlite", "file", "http", "https", "databricks")):
        raise ArtifactLocationError(
            f"tracking.uri {mask_uri(uri)} is a database and no tracking.artifacts says where the runs' "
            "artifacts go: set one (a folder every writer reaches, or an s3:// URI), e.g. "
            "--set tracking.artifacts=/shared/mlartifacts, or log through an MLflow server "
            "(make mlflow-server) and pass its http:// URI"
        )
    return None


class Tracker:
    """One MLflow experiment on one tracking store, used by a single writer process."""

    def __init__(self, uri: str | None, experiment: str, artifacts: str | None = None) -> None:
        self.uri = resolve_tracking_uri(uri)
        self.experiment = experiment
        check_tracking(self.uri)
        from mlflow import MlflowClient  # mlflow: see the module docstring

        # two writers creating the tables (or the experiment) at once crash one: one at a time
        with schema_lock(self.uri):
            self.client = MlflowClient(tracking_uri=self.uri)
            exp = with_retry(lambda: self.client.get_experiment_by_name(experiment))
            if exp is None:
                loc = artifact_location(self.uri, experiment, artifacts)
                self.experiment_id = with_retry(
                    lambda: self.client.create_experiment(
                        experiment, artifact_location=loc, tags=experiment_tags()
                    )
                )
            else:
                if exp.lifecycle_stage == "deleted":
                    with_retry(lambda: self.client.restore_experiment(exp.experiment_id))
                self.experiment_id = exp.experiment_id
                # experiments created before the tags existed (or by other tools) get them now
                for key, value in experiment_tags(exp.tags).items():
                    with_retry(
                        partial(self.client.set_experiment_tag, self.experiment_id, key, value)
                    )

    def start_run(
        self, name: str, tags: Mapping[str, Any] | None = None, parent_id: str | None = None
    ) -> str:
        """Create a RUNNING run; returns its id."""
        run_tags = {"host": socket.gethostname(), "pid": str(os.getpid())}
        run_tags |= {k: mask_uri(str(v)) for k, v in (tags or {}).items()}
        if parent_id:
            run_tags["mlflow.parentRunId"] = parent_id
        run = with_retry(
            lambda: self.client.create_run(self.experiment_id, run_name=name, tags=run_tags)
        )
        return run.info.run_id

    def log(
        self,
        run_id: str,
        params: Mapping[str, Any] | None = None,
        metrics: Mapping[str, float] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> None:
        """Log params (as strings), finite metrics and tags in batches, passwords in URIs masked."""
        from mlflow.entities import Metric, Param, RunTag  # mlflow: see the module docstring

        now = int(time.time() * 1000)
        p = [Param(k, mask_uri(str(v))[:6000]) for k, v in (params or {}).items()]
        m = [
            Metric(k, float(v), now, 0)
            for k, v in (metrics or {}).items()
            if v is not None and math.isfinite(float(v))
        ]
        t = [RunTag(k, mask_uri(str(v))) for k, v in (tags or {}).items()]
        # MLflow's batch limits: 100 params, 100 tags, 1000 metrics per call
        for i in range(0, max(len(p), len(t)), 100):
            with_retry(
                partial(self.client.log_batch, run_id, params=p[i : i + 100], tags=t[i : i + 100])
            )
        for j in range(0, len(m), 1000):
            with_retry(partial(self.client.log_batch, run_id, metrics=m[j : j + 1000]))

    def log_artifacts(
        self, run_id: str, folder: str | os.PathLike, artifact_path: str | None = None
    ) -> None:
        with_retry(lambda: self.client.log_artifacts(run_id, str(folder), artifact_path))

    def log_table(self, run_id: str, table: Any, artifact_file: str) -> None:
        """Log a pandas DataFrame as an MLflow table (``artifact_file`` ending in ``.json``)."""
        with_retry(lambda: self.client.log_table(run_id, table, artifact_file))

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        with_retry(lambda: self.client.set_terminated(run_id, status))

    def search(self, filter_string: str = "", max_results: int = 5000) -> Any:
        return with_retry(
            lambda: self.client.search_runs(
                [self.experiment_id], filter_string=filter_string, max_results=max_results
            )
        )

    def finished_by_hash(
        self, store_fingerprint: str | None = None, code_fingerprint: str | None = None
    ) -> dict[str, Any]:
        """config hash -> its most recent FINISHED run (a resume skips it), of the store and code given."""
        query = f"attributes.status = 'FINISHED' and tags.{CONFIG_HASH_TAG} != ''"
        if store_fingerprint is not None:
            query += f" and tags.store_fingerprint = '{store_fingerprint}'"
        if code_fingerprint is not None:
            query += f" and tags.code_fingerprint = '{code_fingerprint}'"
        runs = sorted(self.search(query), key=lambda r: r.info.start_time)
        return {r.data.tags[CONFIG_HASH_TAG]: r for r in runs}

    def finished_child(self, parent_id: str, config_hash: str) -> Any | None:
        """The FINISHED child run of ``parent_id`` with ``config_hash``, or None (a Dask task run again logs once)."""
        runs = self.search(
            f"attributes.status = 'FINISHED' and tags.mlflow.parentRunId = '{parent_id}' "
            f"and tags.{CONFIG_HASH_TAG} = '{config_hash}'",
            max_results=1,
        )
        return runs[0] if runs else None

    def reap_stale(self) -> list[str]:
        """Mark runs left RUNNING by a process that no longer exists as KILLED; returns their ids."""
        host = socket.gethostname()
        reaped = []
        for r in self.search("attributes.status = 'RUNNING'"):
            tags = r.data.tags
            pid = int(tags.get("pid", "0") or 0)
            if tags.get("host") == host and pid and pid != os.getpid() and pid_alive(pid):
                continue
            if tags.get("host") not in (None, host):
                continue  # another machine's run: not ours to judge
            self.finish(r.info.run_id, "KILLED")
            reaped.append(r.info.run_id)
        return reaped

    def reap_children(self, parent_id: str, finished: Mapping[str, str] | None = None) -> list[str]:
        """Mark the child runs of ``parent_id`` still RUNNING as KILLED with a ``worker_lost`` tag; their ids."""
        finished = finished or {}
        marked = []
        for r in self.search(
            f"attributes.status = 'RUNNING' and tags.mlflow.parentRunId = '{parent_id}'"
        ):
            tags = r.data.tags
            h = tags.get(CONFIG_HASH_TAG, "")
            writer = f"host {tags.get('host', '?')}, pid {tags.get('pid', '?')}"
            after = "a resumed sweep runs this configuration again"
            if h in finished:
                after = f"the configuration finished in run {finished[h]}"
            text = f"the process logging this run ({writer}) was lost before it finished; {after}"
            self.log(r.info.run_id, tags={WORKER_LOST_TAG: text})
            self.finish(r.info.run_id, "KILLED")
            marked.append(r.info.run_id)
        return marked


def export_predictions(
    run_id: str, split: str, out_dir: str | os.PathLike, tracking_uri: str | None = None
) -> list[Path]:
    """Copy a run's predictions of ``split`` into ``out_dir`` as challenge files; FileNotFoundError if none."""
    client = tracking_client(resolve_tracking_uri(tracking_uri), write=False)
    from mlflow.exceptions import MlflowException  # mlflow: see the module docstring

    try:
        run = client.get_run(run_id)
    except MlflowException as e:
        raise FileNotFoundError(
            f"no run {run_id} in {mask_uri(resolve_tracking_uri(tracking_uri))}; copy the id from the MLflow UI"
        ) from e
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(client.download_artifacts(run_id, f"predictions/{split}", tmp))
        except (MlflowException, OSError) as e:
            raise FileNotFoundError(
                f"run {run_id} has no predictions for split {split!r} (artifacts predictions/{split}/)"
                + _unseen_hint(client, run, split)
            ) from e
        files = sorted(local.glob("*.csv"))
        if not files:
            raise FileNotFoundError(
                f"run {run_id} has no predictions for split {split!r}"
                + _unseen_hint(client, run, split)
            )
        for f in files:
            shutil.copyfile(f, out / f.name)
    return [out / f.name for f in files]


#: the tag an unseen-listener run carries with the config hash of the run it evaluates again
#: (``experiments.tracking.child_runs.UNSEEN_OF_TAG``, which imports this module)
_UNSEEN_OF = "unseen_of"


def _unseen_hint(client: Any, run: Any, split: str) -> str:
    """Where the predictions of ``split`` are when ``run`` has none (``*_unseen``: its unseen-listener run); ""."""
    tags = run.data.tags
    if split.endswith("_unseen") and CONFIG_HASH_TAG in tags:
        found = client.search_runs(
            [run.info.experiment_id],
            filter_string=f"tags.{_UNSEEN_OF} = '{tags[CONFIG_HASH_TAG]}'",
            max_results=1,
        )
        if found:
            other = found[0].info.run_id
            return f"; its unseen-listener run has them: experiments export {other} --split {split}"
        return (
            "; *_unseen predictions are in the unseen-listener runs (tag unseen_of), logged for "
            "each feature set's chosen generalized configuration when unseen_listener is on"
        )
    return ""
