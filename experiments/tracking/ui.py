"""``python -m experiments.tracking.ui`` (``make ui``): tag this package's experiments so that MLflow's UI opens them
on the runs table with the CCC columns, and print a link to each (docs/results.md)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from .redact import mask_uri
from .tracker import CONFIG_HASH_TAG, resolve_tracking_uri, with_retry
from .ui_view import DEFAULT_UI_URL, experiment_tags, runs_url, ui_base_url

#: run tags that mark a run as this package's: a configuration's hash (a sweep's or a
#: whole-session study's child run), the code fingerprint every run of ``experiments`` logs
#: (sweeps' parents, ``agreement``, ``sessions``)
PACKAGE_RUN_TAGS = (CONFIG_HASH_TAG, "code_fingerprint")


def is_package_experiment(client: Any, experiment_id: str) -> bool:
    """Whether one of the experiment's runs carries a tag of :data:`PACKAGE_RUN_TAGS`."""
    return any(
        with_retry(partial(client.search_runs, [experiment_id], f"tags.{tag} != ''", max_results=1))
        for tag in PACKAGE_RUN_TAGS
    )


def prepare_experiments(client: Any, only_ours: bool = True) -> list[tuple[str, str]]:
    """Give this package's experiments (with ``only_ours`` False: every one) their tags; returns (name, id) of each."""
    out = []
    for exp in with_retry(lambda: client.search_experiments(max_results=1000)):
        if only_ours and not is_package_experiment(client, exp.experiment_id):
            continue
        for key, value in experiment_tags(exp.tags).items():
            with_retry(partial(client.set_experiment_tag, exp.experiment_id, key, value))
        out.append((exp.name, exp.experiment_id))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m experiments.tracking.ui``: tag this package's experiments and print a link to each one's runs."""
    p = argparse.ArgumentParser(prog="python -m experiments.tracking.ui", description=main.__doc__)
    p.add_argument(
        "--tracking-uri", default="mlruns", help="MLflow tracking URI or folder (default: mlruns/)"
    )
    p.add_argument(
        "--url",
        default=None,
        help=f"where the UI is served (default: the tracking server, else {DEFAULT_UI_URL})",
    )
    args = p.parse_args(argv)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = resolve_tracking_uri(args.tracking_uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists():
        print(f"no MLflow database at {uri[len('sqlite:///') :]} yet: run `make sweep` first")
        return 0
    from mlflow import MlflowClient  # heavy: loaded once there is a database to read

    base = args.url or ui_base_url(uri)
    found = prepare_experiments(MlflowClient(tracking_uri=uri))
    if not found:
        print(f"no runs of this package in {mask_uri(uri)} yet: run `make sweep` first")
        return 0
    for name, eid in found:
        print(f"{name}: {runs_url(eid, base)}")
    print(
        "(runs best validation CCC first, CCC columns shown; the 'Model training' switch at the top "
        "of the sidebar opens every experiment on its runs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
