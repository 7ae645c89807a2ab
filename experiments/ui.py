"""What the MLflow UI shows first for this package's experiments: the runs table with the CCC columns.

MLflow 3 may open an experiment on its GenAI overview (traces, judges) instead of its runs.
What decides, read in the UI bundle MLflow ships (``mlflow/server/js/build``, MLflow 3.17):

* the experiment tag ``mlflow.experimentKind`` (experiment kinds came with MLflow 3.4): the kind
  ``custom_model_development`` ("Machine learning") opens the runs table, ``genai_development``
  the GenAI overview. :func:`experiment_tags` gives it, and :class:`~experiments.tracking.Tracker`
  sets it on every experiment it creates or opens that lacks it;
* since the sidebar's "GenAI / Model training" switch (MLflow 3.17 has it) the switch decides
  instead, for every experiment. A browser remembers it (local storage ``mlflow.workflowType``,
  GenAI until changed); a link sets it with ``workflowType=machine_learning``.

So the package does both, and the links :func:`runs_url` builds (``make ui`` prints one per
experiment) carry the switch and a saved view: an experiment tag
``mlflow.sharedViewState.<key>`` holds a runs-table view as JSON (sort order, columns), and the
runs page opens it with ``?viewStateShareKey=<key>``; it is what the UI's own "Share" button
writes. The view :func:`ccc_view` lists the child runs best validation CCC first, with the four
CCC metrics and the main parameters as columns.

``python -m experiments.ui [--tracking-uri URI] [--url URL]`` tags this package's experiments
(those with sweep runs) and prints their links; ``make ui`` runs it before starting the UI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

#: experiment tag MLflow 3's UI reads for the experiment's kind
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
#: the kind whose experiments open on the runs table ("Machine learning" in the UI)
EXPERIMENT_KIND = "custom_model_development"
#: prefix of the experiment tags that hold shared runs-table views (the UI's "Share" button)
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: key of this package's view: ``...?viewStateShareKey=ccc``
VIEW_KEY = "ccc"
VIEW_TAG = VIEW_TAG_PREFIX + VIEW_KEY
#: metric columns of the view; the first sorts it (best first)
CCC_METRICS = ("val.ccc_personalized", "val.ccc_generalized", "test.ccc_personalized", "test.ccc_generalized")
#: parameter columns of the view
VIEW_PARAMS = ("model.name", "features.set", "personalization", "window.lengths_s", "window.delay_s", "postprocess.smooth_s")
#: the runs table's column id of the run names
RUN_NAME_COLUMN = "attributes.`Run Name`"
#: where ``make ui`` serves the UI
DEFAULT_UI_URL = "http://127.0.0.1:5000"


def ccc_view() -> dict:
    """The runs-table view of :data:`VIEW_TAG`: child runs by validation CCC, CCC and main params as columns.

    Keys are the UI's own (its search facets and UI state); column ids are
    ``metrics.`<name>``` and ``params.`<name>```. The UI's default columns (source, models,
    dataset) are left out: they are empty for these runs.
    """
    metrics = [f"metrics.`{m}`" for m in CCC_METRICS]
    params = [f"params.`{p}`" for p in VIEW_PARAMS]
    return {
        "orderByKey": metrics[0],
        "orderByAsc": False,
        "searchFilter": "",
        "selectedColumns": [*metrics, *params],
        # widths (pixels) apply to the columns listed in the order only
        "columnOrder": [RUN_NAME_COLUMN, *metrics, *params],
        "columnWidths": {RUN_NAME_COLUMN: 300, **{m: 155 for m in metrics}, **{p: 120 for p in params}},
    }


def experiment_tags(current: Mapping[str, str] | None = None) -> dict[str, str]:
    """The experiment tags this package sets that ``current`` (an experiment's tags) lacks or has stale.

    The kind is only added when missing (a kind someone chose in the UI stays); the view is
    rewritten when it differs from :func:`ccc_view`, so it follows the package.
    """
    current = current or {}
    want = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_TAG: json.dumps(ccc_view(), separators=(",", ":"))}
    out = {}
    if EXPERIMENT_KIND_TAG not in current:
        out[EXPERIMENT_KIND_TAG] = want[EXPERIMENT_KIND_TAG]
    if current.get(VIEW_TAG) != want[VIEW_TAG]:
        out[VIEW_TAG] = want[VIEW_TAG]
    return out


def ui_base_url(tracking_uri: str | None, default: str = DEFAULT_UI_URL) -> str:
    """Where the UI of ``tracking_uri`` is served: the server itself for ``http(s)://``, else ``default``."""
    if tracking_uri and tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return default.rstrip("/")


def runs_url(experiment_id: str, base_url: str = DEFAULT_UI_URL) -> str:
    """Link that opens an experiment's runs table with the CCC view, in any browser.

    >>> runs_url("3")
    'http://127.0.0.1:5000/#/experiments/3/runs?viewStateShareKey=ccc&workflowType=machine_learning'
    """
    # no sort or filter parameters here: with any of them the UI ignores the shared view
    return (f"{base_url.rstrip('/')}/#/experiments/{quote(str(experiment_id))}/runs"
            f"?viewStateShareKey={VIEW_KEY}&workflowType=machine_learning")


def prepare_experiments(client, only_with_sweeps: bool = True) -> list[tuple[str, str]]:
    """Give this package's experiments their tags (:func:`experiment_tags`); returns (name, id) of each.

    With ``only_with_sweeps`` an experiment counts when one of its runs carries a
    ``config_hash`` tag (a sweep's child run); others are left alone and not listed.
    """
    from .tracking import CONFIG_HASH_TAG, with_retry

    out = []
    for exp in with_retry(lambda: client.search_experiments(max_results=1000)):
        if only_with_sweeps and not with_retry(lambda exp=exp: client.search_runs(
                [exp.experiment_id], f"tags.{CONFIG_HASH_TAG} != ''", max_results=1)):
            continue
        for key, value in experiment_tags(exp.tags).items():
            with_retry(lambda k=key, v=value, exp=exp: client.set_experiment_tag(exp.experiment_id, k, v))
        out.append((exp.name, exp.experiment_id))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m experiments.ui``: tag this package's experiments and print a link to each one's runs."""
    p = argparse.ArgumentParser(prog="python -m experiments.ui", description=main.__doc__)
    p.add_argument("--tracking-uri", default="mlruns", help="MLflow tracking URI or folder (default: mlruns/)")
    p.add_argument("--url", default=None, help=f"where the UI is served (default: the tracking server, else {DEFAULT_UI_URL})")
    args = p.parse_args(argv)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from .tracking import resolve_tracking_uri

    uri = args.tracking_uri
    if "://" not in uri:
        uri = resolve_tracking_uri(uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists():
        print(f"no MLflow database at {uri[len('sqlite:///') :]} yet: run `make sweep` first")
        return 0
    from mlflow import MlflowClient

    base = args.url or ui_base_url(uri)
    found = prepare_experiments(MlflowClient(tracking_uri=uri))
    if not found:
        print(f"no sweeps in {uri} yet: run `make sweep` first")
    for name, eid in found:
        print(f"{name}: {runs_url(eid, base)}")
    if found:
        print("(runs best validation CCC first, CCC columns shown; the 'Model training' switch at the top "
              "of the sidebar opens every experiment on its runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
