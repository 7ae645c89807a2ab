"""Unseen listeners, nested (docs/results.md, Unseen listeners): :func:`nested_unseen` chooses
each held-out listener L's configuration by the other listeners' selection scores of the
configurations fitted without L (``<val|loso>_without_listener_<L>.<metric>_generalized``) and
reports its ``test_unseen`` score on L, which nothing of L reached."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..config.metrics import DEFAULT_METRIC, MetricSpec, get_metric
from ..tracking.tracker import CONFIG_HASH_TAG


def unseen_columns(m: MetricSpec) -> list[str]:
    """The columns of ``reports/ablation_unseen.csv`` for metric ``m`` (a contract:
    docs/design.md#reports)."""
    return [
        "feature_set",
        "listener",
        "selection_metric",
        f"selection_{m.name}",  # the chosen configuration's selection score
        m.column("test_unseen"),
        "run_id",
        "config_hash",
        "label",
        "n_candidates",
    ]


#: :func:`unseen_columns` of the default metric (``selection_ccc``, ``ccc_test_unseen``)
UNSEEN_COLUMNS = unseen_columns(get_metric(DEFAULT_METRIC))
#: the feature set column of :func:`nested_unseen`'s rows when the sets compete together
ALL_SETS = "all"


def nested_unseen(
    table: pd.DataFrame,
    protocol: str = "val",
    per_feature_set: bool = True,
    metric: str = DEFAULT_METRIC,
) -> pd.DataFrame:
    """One row per feature set and held-out listener of the sweep's ``table``: the generalized
    configuration chosen by ``metric`` on the other listeners' selection split (``protocol``), its
    score there and its test score on the listener (``<metric>_test_unseen``); rows without the
    nested metrics do not compete. ``per_feature_set`` False: every feature set's configurations
    compete together (the sweep summary's choice)."""
    rows = []
    spec = get_metric(metric)
    if table.empty or "features.set" not in table:
        return pd.DataFrame(columns=unseen_columns(spec))
    selection = re.compile(
        rf"^{re.escape(protocol)}_without_listener_(.+)\.{re.escape(spec.name)}_generalized$"
    )
    done = table[table["status"].isin(["done", "reused"])] if "status" in table else table
    matched = {str(c): m for c in done.columns if (m := selection.match(str(c))) is not None}
    groups = (
        list(done.groupby("features.set", sort=False)) if per_feature_set else [(ALL_SETS, done)]
    )
    for column in sorted(matched):
        listener = matched[column].group(1)
        for _, part in groups:
            candidates = part[part[column].notna()]
            if candidates.empty:
                continue
            # the first best, as idxmax gives it (NaN rows are not candidates)
            best = candidates.iloc[spec.best_index(candidates[column].to_numpy(dtype=float))]
            test = spec.key("test_unseen", f"listener_{listener}")
            rows.append(
                {
                    "feature_set": str(best["features.set"]),
                    "listener": int(float(listener)),
                    "selection_metric": column,
                    f"selection_{spec.name}": float(best[column]),
                    spec.column("test_unseen"): float(best[test])
                    if test in best and pd.notna(best[test])
                    else np.nan,
                    "run_id": str(best.get("run_id", "")),
                    "config_hash": str(best.get(CONFIG_HASH_TAG, "")),
                    "label": str(best.get("label", "")),
                    "n_candidates": len(candidates),
                }
            )
    out = pd.DataFrame(rows, columns=unseen_columns(spec))
    return out.sort_values(["feature_set", "listener"], kind="stable").reset_index(drop=True)


def nested_unseen_mean(rows: pd.DataFrame, metric: str = DEFAULT_METRIC) -> dict[str, float]:
    """Feature set -> mean over held-out listeners of their chosen configuration's test score
    of ``metric`` (each listener's own mean over their test stories, then the mean over
    listeners)."""
    column = get_metric(metric).column("test_unseen")
    return {str(fs): float(g[column].mean()) for fs, g in rows.groupby("feature_set")}
