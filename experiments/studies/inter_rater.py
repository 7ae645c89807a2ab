"""Inter-rater agreement of each target: ICC and mean pairwise CCC per session and pooled,
as rated and with each rater's reaction lag removed (`experiments agreement`)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pandas as pd

from featurestore import Store

from ..data.gold_standard import agreement as rater_agreement
from ..data.gold_standard import estimate_lags
from ..evaluation import markdown

#: a store, or its folder
StoreLike: TypeAlias = Store | str | os.PathLike
#: columns of ``inter_rater.csv``
RATER_COLUMNS = (
    "target session aligned raters n_frames ICC(2,1) ICC(3,1) ICC(2,k) ICC(3,k) mean_pairwise_ccc"
).split()


def as_store(store: StoreLike) -> Store:
    """``store`` opened, when it is a folder."""
    return store if isinstance(store, Store) else Store(store)


class EmptyRaterWarning(UserWarning):
    """A rater stored for a session holds no rating at all (every frame missing)."""


def warn_empty_raters(by_target: dict[str, dict[str, dict[str, np.ndarray]]]) -> list[str]:
    """``target@rater in session`` of each rater stored all missing, named in one :class:`EmptyRaterWarning`."""
    empty = [
        f"{t}@{r} in {s}"
        for t, sessions in sorted(by_target.items())
        for s, raters in sorted(sessions.items())
        for r, y in sorted(raters.items())
        if not np.isfinite(np.asarray(y, dtype=float)).any()
    ]
    if empty:
        warnings.warn(
            EmptyRaterWarning(
                f"{len(empty)} rater trace(s) are empty (every frame missing): {', '.join(empty)}; "
                "they add no frame to the agreement (blank ICCs where no two raters overlap). "
                "Check that each rater's file rates its recording (`featurestore scan` names a "
                "file covering less than min_coverage of it) and re-extract"
            ),
            stacklevel=3,
        )
    return empty


def inter_rater_table(
    store: StoreLike, max_lag_s: float = 5.0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Inter-rater agreement of every target stored with raters (:data:`RATER_COLUMNS`, per session
    then ``pooled``, as rated and lag-aligned) and the lags; both empty without raters."""
    st = as_store(store)
    by_target: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    fps = 25.0
    for s in st.list_sessions():
        with st.open_session(s) as shard:
            fps = shard.meta.fps
            for t in shard.label_targets():
                raters = shard.raters(t)
                if raters:
                    by_target.setdefault(t, {})[s] = {r: shard.rater_labels(t, r) for r in raters}
    warn_empty_raters(by_target)
    rows, lag_rows = [], []
    for t, sessions in sorted(by_target.items()):
        lags = estimate_lags(list(sessions.values()), fps, max_lag_s)
        lag_rows += [
            {"target": t, "rater": r, "lag_frames": v, "lag_s": v / fps} for r, v in lags.items()
        ]
        for aligned, use in ((False, None), (True, lags)):
            rows += [
                {"target": t, "aligned": aligned, **row} for row in rater_agreement(sessions, use)
            ]
    table = pd.DataFrame(rows).reindex(columns=RATER_COLUMNS)
    return table, pd.DataFrame(lag_rows, columns=["target", "rater", "lag_frames", "lag_s"])


def inter_rater_markdown(table: pd.DataFrame, lags: pd.DataFrame) -> str:
    """The ``## Inter-rater agreement`` section of ``agreement.md``."""
    lines = ["## Inter-rater agreement", ""]
    if table.empty:
        return "\n".join([*lines, "No target is stored with several raters.", ""])
    lines += [
        "Per target, over frames every rater rated: ICC(2,1) (two-way random, absolute agreement,",
        "one rater), ICC(3,1) (two-way mixed, consistency, one rater), ICC(2,k)/ICC(3,k) (the same",
        "for the raters' mean; Shrout & Fleiss 1979) and the mean CCC over rater pairs; `aligned`:",
        "after removing each rater's estimated reaction lag (below). Frames are not independent:",
        "no significance is implied.",
        "",
    ]
    cols = RATER_COLUMNS[:4] + RATER_COLUMNS[5:]
    lines += markdown.table(
        cols,
        (
            [markdown.number(r[c]) if isinstance(r[c], float) else str(r[c]) for c in cols]
            for _, r in table[table.session == "pooled"].iterrows()
        ),
    )
    lines += ["", "Reaction lags (relative to the earliest rater):", ""]
    lines += markdown.table(
        ["target", "rater", "lag (frames)", "lag (s)"],
        ([r.target, r.rater, r.lag_frames, f"{r.lag_s:.2f}"] for r in lags.itertuples()),
    )
    return "\n".join(lines) + "\n"


def write_raters(out: Path, raters: pd.DataFrame, lags: pd.DataFrame) -> list[Path]:
    """``inter_rater.csv`` and ``inter_rater_lags.csv`` into ``out`` (none without raters)."""
    if raters.empty:
        return []
    files = [out / "inter_rater.csv", out / "inter_rater_lags.csv"]
    raters.to_csv(files[0], index=False)
    lags.to_csv(files[1], index=False)
    return files


def rater_metrics(raters: pd.DataFrame) -> dict[str, float]:
    """MLflow metrics of the pooled inter-rater rows (``raters.<target>[.aligned].icc_2_1``...)."""
    out = {}
    for _, r in raters[raters.session == "pooled"].iterrows():
        stem = f"raters.{r.target}" + (".aligned" if r.aligned else "")
        for c in RATER_COLUMNS[5:]:
            name = c.lower().replace("(", "_").replace(",", "_").replace(")", "")
            if pd.notna(r[c]):
                out[f"{stem}.{name}"] = float(r[c])
    return out
