"""Unseen listeners, nested: each held-out listener's configuration chosen without them.

For a person never seen, the configuration must be chosen, fitted and post-processed without
that person. With ``unseen_listener: {selection: nested}``, every generalized-track
configuration of the sweep is also fitted once per listener L without L
(:mod:`experiments.evaluation.fitting`, parts ``unseen``) and scores, with those models and
their post-processing, the *other* listeners' selection split: under protocol ``val`` their
validation stories (metric ``val_without_listener_<L>.ccc_generalized``); under ``loso`` their
train + val stories, each predicted by a model fitted without that story and without L
(``loso_without_listener_<L>.ccc_generalized``). :func:`nested_unseen` then chooses, for each
feature set and each L, the configuration with the best such score, and reports the chosen
configuration's ``test_unseen`` score on L (``test_unseen.ccc_listener_<L>``): nothing of L
(labels, rescaling, calibration, imputation, selection) reached it.

The run that holds L's predictions is the chosen configuration's child run:
``experiments export RUN_ID --split test_unseen`` writes them per session.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..config.metrics import get_metric
from ..tracking.tracker import CONFIG_HASH_TAG

#: the columns of ``reports/ablation_unseen.csv``
UNSEEN_COLUMNS = [
    "feature_set",
    "listener",
    "selection_metric",
    "selection_ccc",
    "ccc_test_unseen",
    "run_id",
    "config_hash",
    "label",
    "n_candidates",
]
#: the feature set column of :func:`nested_unseen`'s rows when the sets compete together
ALL_SETS = "all"


def nested_unseen(
    table: pd.DataFrame, protocol: str = "val", per_feature_set: bool = True, metric: str = "ccc"
) -> pd.DataFrame:
    """One row per feature set and held-out listener: the generalized configuration chosen on the
    other listeners' selection split (``protocol``: their validation stories, or their LOSO
    scores; models fitted without the listener), its selection score, and its test score on the
    held-out listener (``ccc_test_unseen``).

    ``table``: the sweep's table (one row per configuration with params and metrics). Rows
    without the nested metrics (another track, or ``unseen_listener`` not nested) do not
    compete. ``per_feature_set`` False: every feature set's configurations compete together
    (the sweep summary's choice), and ``feature_set`` is the chosen configuration's set.
    ``metric``: the config's (:mod:`experiments.config.metrics`): its values and direction choose.
    """
    rows = []
    if table.empty or "features.set" not in table:
        return pd.DataFrame(columns=UNSEEN_COLUMNS)
    spec = get_metric(metric)
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
                    "selection_ccc": float(best[column]),
                    "ccc_test_unseen": float(best[test])
                    if test in best and pd.notna(best[test])
                    else np.nan,
                    "run_id": str(best.get("run_id", "")),
                    "config_hash": str(best.get(CONFIG_HASH_TAG, "")),
                    "label": str(best.get("label", "")),
                    "n_candidates": len(candidates),
                }
            )
    out = pd.DataFrame(rows, columns=UNSEEN_COLUMNS)
    return out.sort_values(["feature_set", "listener"], kind="stable").reset_index(drop=True)


def nested_unseen_mean(rows: pd.DataFrame) -> dict[str, float]:
    """Feature set -> mean over held-out listeners of their chosen configuration's test CCC
    (each listener's own mean over their test stories, then the mean over listeners)."""
    return {str(fs): float(g["ccc_test_unseen"].mean()) for fs, g in rows.groupby("feature_set")}
