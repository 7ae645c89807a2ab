"""One configuration's MLflow child run, created, filled and closed in one go (:func:`log_child`;
what it holds: docs/design.md#mlflow-runs), and its row of the sweep table (:class:`RunRow`)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ..config.grid import Trial, format_value
from ..config.metrics import DEFAULT_METRIC, get_metric
from ..evaluation.evaluate import CALIBRATION_SHRINKAGE, TrialResult
from ..evaluation.plots import with_figures
from ..models.factory import make_model
from ..models.personalization import make_personalizer
from .context import SweepContext
from .provenance import code_version
from .redact import mask_all
from .tracker import CONFIG_HASH_TAG, Tracker
from .ui_view import track_metrics

#: tag (and sweep table column) of a chosen configuration's unseen-listener run: the config hash
#: of the grid configuration it evaluates again (see :func:`run_sweep`)
UNSEEN_OF_TAG = "unseen_of"


@dataclass(frozen=True)
class Outcome:
    """A configuration's end: its ``result`` (for the sweep to log), or the ``row`` of the child
    run a worker logged itself, or neither and the ``error`` that failed it."""

    trial: Trial
    result: TrialResult | None = None
    row: RunRow | None = None
    error: str = ""

    @property
    def failed(self) -> bool:
        """Nothing was evaluated (``error`` says why); a worker-logged row carries its own status."""
        return self.result is None and self.row is None


def identity_tags(trial: Trial) -> dict[str, str]:
    """A configuration's config hash and, for a chosen one's unseen-listener run, its grid one's."""
    tags = {CONFIG_HASH_TAG: trial.hash()}
    if trial.unseen_listener and not trial.unseen_nested:
        tags[UNSEEN_OF_TAG] = replace(trial, unseen_listener=False).hash()
    return tags


@dataclass(frozen=True)
class RunRow:
    """One configuration's child run as a row of the sweep table: ``status`` ``done`` (logged by this
    sweep), ``reused`` (an earlier sweep's) or ``failed`` (``error`` says why), its identity
    ``tags`` (:func:`identity_tags`), ``params`` (:meth:`Trial.params`) and ``metrics``."""

    run_id: str
    status: str
    label: str
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def config_hash(self) -> str:
        return self.tags[CONFIG_HASH_TAG]

    @property
    def track(self) -> str | None:
        return self.params.get("track")

    def to_dict(self) -> dict[str, Any]:
        """The row as the sweep table has it (``error`` only for a failed run)."""
        row = {
            "run_id": self.run_id,
            "status": self.status,
            "label": self.label,
            **self.tags,
            **self.params,
            **self.metrics,
        }
        if self.failed:
            row["error"] = self.error
        return row


def warnings_tags(notes: Sequence[str]) -> dict[str, str] | None:
    """A run's ``warnings`` tag: the notes joined, cut to MLflow's 5,000 characters; None without."""
    return {"warnings": " | ".join(notes)[:5000]} if notes else None


def sweep_table(rows: Sequence[RunRow]) -> pd.DataFrame:
    """The sweep table: one row per configuration (:meth:`RunRow.to_dict`), in ``rows``' order."""
    return pd.DataFrame([r.to_dict() for r in rows])


def run_row(trial: Trial, run: Any, status: str) -> RunRow:
    """The sweep-table row of a finished MLflow ``run`` of ``trial`` (``reused`` or ``done``)."""
    return RunRow(
        run.info.run_id,
        status,
        trial.label(),
        identity_tags(trial),
        trial.params(),
        dict(run.data.metrics),
    )


def log_child(
    tracker: Tracker, ctx: SweepContext, trial: Trial, result: TrialResult | None, error: str = ""
) -> RunRow:
    """Create, fill and close one configuration's child run (``result`` None: a FAILED run carrying
    ``error`` as a tag); returns its row of the sweep table."""
    ident = identity_tags(trial)
    tags = {**ident, "track": trial.track, "causal": format_value(trial.causal), **ctx.child_tags}
    run_id = tracker.start_run(trial.label()[:250], tags=tags, parent_id=ctx.parent_run_id)
    params = trial.params()
    if result is None:
        tracker.log(run_id, params=params, tags={"error": error[:5000]})
        tracker.finish(run_id, "FAILED")
        return RunRow(run_id, "failed", trial.label(), ident, params, error=error)
    m = {**result.metrics, "fit_seconds": result.fit_seconds, "n_train_rows": result.n_train_rows}
    m.update(track_metrics(m, trial.track, trial.metric))
    tracker.log(run_id, params=params, metrics=m, tags=warnings_tags(result.warnings))
    if ctx.log_artifacts:
        with tempfile.TemporaryDirectory() as tmp:
            write_artifacts(result, ctx.cfg.to_dict(), Path(tmp))
            tracker.log_artifacts(run_id, tmp)
    tracker.finish(run_id, "FINISHED")
    return RunRow(run_id, "done", trial.label(), ident, params, m)


def resolved_params(trial: Trial) -> dict[str, str]:
    """Every parameter of the configuration's estimator, defaults included (scikit-learn's
    ``get_params(deep=True)`` of the personalization wrapper and its pipeline), plus the fixed
    settings of the evaluation: what exactly ran, for a reader a year later."""
    model = make_personalizer(
        trial.personalization, make_model(trial.model, trial.hyperparams, seed=trial.seed)
    )
    out = {
        k: repr(v) for k, v in model.get_params(deep=True).items() if not hasattr(v, "get_params")
    }
    out["evaluate.calibration_shrinkage"] = repr(CALIBRATION_SHRINKAGE)
    return dict(sorted(out.items()))


def write_prediction_csv(path: Path, prediction: np.ndarray, header: str) -> None:
    """One session's per-frame predictions as the challenge's CSV: a header (the target's name),
    then one value per line with 9 decimals; the bytes of ``np.savetxt(path, prediction,
    fmt="%.9f", header=header, comments="")``, 5x faster (its CSVs of a full-size sweep took 11 s)."""
    values = np.asarray(prediction, dtype=np.float64).ravel().tolist()
    path.write_text(header + "\n" + "".join(map("%.9f\n".__mod__, values)))


def matrix_file(metric: str = DEFAULT_METRIC) -> str:
    """The child run's artifact of its per-session scores of ``metric``: ``ccc_matrix.csv``."""
    return get_metric(metric).column("matrix") + ".csv"


def write_artifacts(result: TrialResult, cfg_dict: dict, folder: Path) -> None:
    """Write a child run's artifacts: config, score matrix (:func:`matrix_file`), predictions, plots
    (the figures the worker drew; drawn here if it drew none)."""
    trial = result.trial
    resolved = {
        "trial": trial.params(),
        "resolved": resolved_params(trial),
        "code": code_version().tags(),
        "config": cfg_dict,
    }
    # passwords in URIs (tracking.uri, search.storage) as ***: an artifact is read by everyone
    (folder / "config.yaml").write_text(yaml.safe_dump(mask_all(resolved), sort_keys=False))
    result.scores.sort_values(["split", "listener", "story"]).to_csv(
        folder / matrix_file(trial.metric), index=False
    )
    own = result.scores[~result.scores.split.str.endswith("_unseen")]
    split_of = dict(zip(own.session, own.split, strict=False))
    for suffix, predictions in (("", result.predictions), ("_unseen", result.unseen_predictions)):
        for sid, pred in predictions.items():
            d = folder / "predictions" / (split_of[sid] + suffix)
            d.mkdir(parents=True, exist_ok=True)
            # 9 decimals: `experiments export` + `score` then reproduce the logged score to ~1e-9
            write_prediction_csv(d / f"{sid}.csv", pred, trial.target)
    plots = folder / "plots"
    plots.mkdir()
    for name, png in (result.figures or with_figures(result).figures).items():
        (plots / name).write_bytes(png)
