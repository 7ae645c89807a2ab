"""The runs-table view and the experiment tags that make MLflow's UI open on this package's runs (docs/results.md)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from urllib.parse import quote

from ..config.metrics import DEFAULT_METRIC

#: experiment tag MLflow 3's UI reads for the experiment's kind
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
#: the kind whose experiments open on the runs table ("Machine learning" in the UI)
EXPERIMENT_KIND = "custom_model_development"
#: prefix of the experiment tags that hold shared runs-table views (the UI's "Share" button)
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
#: key of this package's view: ``...?viewStateShareKey=ccc`` (it shows the default metric)
VIEW_KEY = DEFAULT_METRIC
VIEW_TAG = VIEW_TAG_PREFIX + VIEW_KEY
#: prefix of the metric that holds, per split, the metric under the run's own track's averaging (``track_ccc.val``)
TRACK_PREFIX = "track_"
#: prefix of the metric under the other track's averaging, logged only where it differs from ``track_<metric>``
OTHER_PREFIX = "other_avg_"
TRACK_CCC, OTHER_CCC = TRACK_PREFIX + DEFAULT_METRIC, OTHER_PREFIX + DEFAULT_METRIC
#: the splits the view shows, in its column order
VIEW_SPLITS = ("val", "test")
#: metric columns of the view; the first sorts it (best first)
CCC_METRICS = tuple(f"{prefix}.{s}" for prefix in (TRACK_CCC, OTHER_CCC) for s in VIEW_SPLITS)
#: parameter columns of the view (``track`` first, right after the run name)
VIEW_PARAMS = (
    "track",
    "features.set",
    "personalization",
    "model.name",
    "window.lengths_s",
    "window.delay_s",
    "postprocess.smooth_s",
)
#: the two averagings differ when their CCCs differ by more than this
SAME_CCC_TOL = 1e-6
#: the runs table's column id of the run names
RUN_NAME_COLUMN = "attributes.`Run Name`"
#: where ``make ui`` serves the UI
DEFAULT_UI_URL = "http://127.0.0.1:5000"


def ccc_view() -> dict:
    """The runs-table view of :data:`VIEW_TAG` (the UI's own keys): best validation CCC first."""
    metrics = [f"metrics.`{m}`" for m in CCC_METRICS]
    track, *params = [f"params.`{p}`" for p in VIEW_PARAMS]
    return {
        "orderByKey": metrics[0],
        "orderByAsc": False,
        "searchFilter": "",
        "selectedColumns": [track, *metrics, *params],
        # widths (pixels) apply to the columns listed in the order only
        "columnOrder": [RUN_NAME_COLUMN, track, *metrics, *params],
        "columnWidths": {
            RUN_NAME_COLUMN: 360,
            track: 110,
            **{m: 130 for m in metrics},
            **{p: 120 for p in params},
        },
    }


def track_metrics(
    metrics: Mapping[str, float], track: str, metric: str = DEFAULT_METRIC
) -> dict[str, float]:
    """The runs table's metrics of a run scored on ``track``: per split ``track_<metric>.<split>``, and
    ``other_avg_<metric>.<split>`` where the other track's averaging differs (by more than :data:`SAME_CCC_TOL`)."""
    mine: dict[str, float] = {}
    other: dict[str, float] = {}
    pattern = re.compile(rf"^([a-z]+)\.{re.escape(metric)}_(personalized|generalized)$")
    for name, value in metrics.items():
        if m := pattern.match(name):
            split, averaging = m.groups()
            (mine if averaging == track else other)[split] = value
    out = {f"{TRACK_PREFIX}{metric}.{split}": v for split, v in mine.items()}
    for split, v in mine.items():
        theirs = other.get(split)
        if theirs is not None and (
            math.isnan(v) != math.isnan(theirs) or abs(v - theirs) > SAME_CCC_TOL
        ):
            out[f"{OTHER_PREFIX}{metric}.{split}"] = theirs
    return out


def experiment_tags(current: Mapping[str, str] | None = None) -> dict[str, str]:
    """The experiment tags this package sets that ``current`` lacks or has stale (a kind chosen in the UI stays)."""
    current = current or {}
    view = json.dumps(ccc_view(), separators=(",", ":"))
    out = {} if EXPERIMENT_KIND_TAG in current else {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
    if current.get(VIEW_TAG) != view:
        out[VIEW_TAG] = view
    return out


def ui_base_url(tracking_uri: str | None, default: str = DEFAULT_UI_URL) -> str:
    """Where the UI of ``tracking_uri`` is served: the server itself for ``http(s)://``, else ``default``."""
    if tracking_uri and tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return default.rstrip("/")


def runs_url(experiment_id: str, base_url: str = DEFAULT_UI_URL) -> str:
    """Link that opens an experiment's runs table with the CCC view.

    >>> runs_url("3")
    'http://127.0.0.1:5000/#/experiments/3/runs?viewStateShareKey=ccc&workflowType=machine_learning'
    """
    # no sort or filter parameters here: with any of them the UI ignores the shared view
    return (
        f"{base_url.rstrip('/')}/#/experiments/{quote(str(experiment_id))}/runs"
        f"?viewStateShareKey={VIEW_KEY}&workflowType=machine_learning"
    )
