"""Sweeps on a Dask cluster: :func:`run_sweep_dask` starts a local cluster or joins one, and runs
:func:`experiments.studies.sweep.run_sweep` with the Dask executor (:mod:`experiments.executors.dask`).

``experiments sweep --executor dask`` starts a local cluster (processes, one thread each) or,
with ``--scheduler tcp://host:8786``, uses an existing one. The sweep logic is the local
sweep's (resume by config hash, a parent run, the dummy baseline first, the summary and the
best child); only the evaluation moves to the workers. With an MLflow tracking server
(``http://``/``https://``) the workers log their own child runs; with a SQLite or file store
this process is the only writer.
"""

from __future__ import annotations

import os
from typing import Any

from featurestore.extraction.distributed import dask_client, n_workers_of

from ..config.schema import ExperimentConfig
from ..executors.dask import DaskExecutor, warm_up
from ..tracking.tracker import resolve_tracking_uri
from .parent_run import SweepResult
from .sweep import run_sweep


def run_sweep_dask(
    cfg: ExperimentConfig,
    store="features",
    scheduler: str | None = None,
    log_on_workers: bool | None = None,
    **options: Any,
) -> SweepResult:
    """Run the sweep of ``cfg`` on Dask; same runs, resume and summary as :func:`run_sweep`.

    Args:
        cfg: the experiment config (its grid is expanded into configurations).
        store: the feature store folder (or a :class:`featurestore.Store`). With ``scheduler``
            it must be on a shared file system at the same path on the client and every worker.
        scheduler: address of a running Dask scheduler (``tcp://host:8786``); None starts a
            local cluster of ``jobs`` worker processes (default: the config's ``jobs``, else 2).
        log_on_workers: workers log their child runs; None = only for an ``http(s)://`` tracking
            URI. SQLite and file stores take one writer, so True is refused for them.
        options: the other keyword arguments of :func:`run_sweep` (``tracking_uri``, ``jobs``,
            ``progress``, ``run_name``, ``log_artifacts``, ``on_result``, ``resume``: see
            :class:`experiments.studies.parent_run.RunOptions`); ``jobs`` sizes the local cluster, the
            sweep then runs as many configurations at a time as the cluster has workers.

    Returns:
        The :class:`SweepResult` of :func:`run_sweep`.
    """
    uri = resolve_tracking_uri(options.get("tracking_uri") or cfg.tracking.uri)
    server = uri.startswith(("http://", "https://"))
    if log_on_workers is None:
        log_on_workers = server
    elif log_on_workers and uri.startswith(("sqlite:", "file:")):
        raise ValueError(
            f"workers cannot log to {uri}: SQLite and file stores take a single writer; start an MLflow "
            "server (`make mlflow-server`) and pass its http:// URI, or let the client log (log_on_workers=False)"
        )
    # MLflow prints two "View run" lines per run logged to a server: they would bury the progress bar
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    with dask_client(scheduler, options.get("jobs") or cfg.jobs) as client:
        # workers import the modelling stack while this process opens the tracking store
        from distributed import fire_and_forget  # dask: imported once a cluster is used

        for addr in client.nthreads():
            fire_and_forget(
                client.submit(
                    warm_up, options.get("log_artifacts", True), workers=[addr], pure=False
                )
            )
        options["jobs"] = n_workers_of(client)
        return run_sweep(
            cfg,
            store=store,
            executor=DaskExecutor(client, log_on_workers=log_on_workers),
            **options,
        )
