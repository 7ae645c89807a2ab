"""CCC and the two OMG-Empathy protocols, with the arithmetic of the official challenge scorer.

The official scorer (``calculateCCC.py`` of knowledgetechnologyuhh/OMGEmpathyChallenge)
computes, per session::

    rho = pearsonr(y_pred, y_true)            # set to 0 when NaN (constant input)
    ccc = 2 * rho * std(y_true) * std(y_pred) / (var(y_pred) + var(y_true) + (mean_pred - mean_true)**2)

with NumPy's population statistics (ddof 0), then the personalized protocol as the mean over
listeners of each listener's mean over stories, and the generalized protocol as the mean over
stories of each story's mean over listeners. :func:`ccc` reproduces this in float64. One case
differs: when both series are constant and equal, the official code divides 0 by 0 and gives
NaN; :func:`ccc` returns 0.0 (no agreement is measurable), so one degenerate session cannot
turn a protocol mean into NaN.

>>> ccc([0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
1.0
>>> ccc([0.1, 0.2, 0.3], [0.0, 0.0, 0.0])
0.0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd


def ccc(y_true: np.ndarray | Iterable[float], y_pred: np.ndarray | Iterable[float]) -> float:
    """Lin's concordance correlation coefficient of two equally long series (official formula).

    Population variances (ddof 0); Pearson's r is taken as 0 when undefined (a constant
    series), which makes the CCC 0; both constant gives 0.0 (the official code gives NaN when
    their means are equal too).

    Raises:
        ValueError: different lengths, empty input, or NaN/inf values (the message says which).
    """
    t = np.asarray(y_true, dtype=np.float64).reshape(-1)
    p = np.asarray(y_pred, dtype=np.float64).reshape(-1)
    if t.shape != p.shape:
        raise ValueError(f"ccc: ground truth has {t.size} values but prediction has {p.size}")
    if t.size == 0:
        raise ValueError("ccc: empty input")
    for name, a in (("ground truth", t), ("prediction", p)):
        bad = ~np.isfinite(a)
        if bad.any():
            raise ValueError(
                f"ccc: {name} has {int(bad.sum())} NaN/inf values (first at row {int(np.argmax(bad))})"
            )
    mt, mp = t.mean(), p.mean()
    dt, dp = t - mt, p - mp
    vt, vp = float(np.mean(dt * dt)), float(np.mean(dp * dp))
    st, sp = np.sqrt(vt), np.sqrt(vp)
    # a series of identical values (tested exactly, as scipy's pearsonr does, since its
    # computed variance may be a rounding residue) has no Pearson r: the official scorer's
    # NaN -> 0
    if vt > 0 and vp > 0 and t.min() != t.max() and p.min() != p.max():
        rho = float(np.clip(np.mean(dt * dp) / (st * sp), -1.0, 1.0))  # as pearsonr clips
    else:
        rho = 0.0
    den = vp + vt + (mp - mt) ** 2
    if den == 0:
        return 0.0
    return float(np.clip(2.0 * rho * st * sp / den, -1.0, 1.0))  # |CCC| <= 1 up to rounding


def _protocol_frame(df: pd.DataFrame | Iterable[Mapping]) -> pd.DataFrame:
    frame = df if isinstance(df, pd.DataFrame) else pd.DataFrame(list(df))
    missing = [c for c in ("listener", "story", "ccc") if c not in frame.columns]
    if missing:
        raise ValueError(
            f"CCC table lacks columns {missing}; expected listener, story, ccc (one row per session)"
        )
    frame = frame[["listener", "story", "ccc"]].astype({"ccc": float})
    dup = frame.duplicated(["listener", "story"], keep=False)
    if dup.any():
        pairs = sorted(
            {(int(a), int(b)) for a, b in frame.loc[dup, ["listener", "story"]].to_numpy()}
        )
        raise ValueError(f"CCC table has more than one row for (listener, story) {pairs[:5]}")
    # a fixed row order makes every mean bit-for-bit independent of the input order
    return frame.sort_values(["listener", "story"], kind="stable").reset_index(drop=True)


def ccc_per_listener(df: pd.DataFrame | Iterable[Mapping]) -> pd.Series:
    """Mean CCC over each listener's stories (index: listener)."""
    f = _protocol_frame(df)
    return f.groupby("listener", sort=True)["ccc"].mean()


def ccc_per_story(df: pd.DataFrame | Iterable[Mapping]) -> pd.Series:
    """Mean CCC over each story's listeners (index: story)."""
    f = _protocol_frame(df)
    return f.groupby("story", sort=True)["ccc"].mean()


def ccc_protocols(df: pd.DataFrame | Iterable[Mapping]) -> dict[str, float]:
    """Both challenge protocols from per-session CCCs (columns listener, story, ccc).

    personalized: mean over listeners of each listener's mean over their stories;
    generalized: mean over stories of each story's mean over listeners. On a complete
    listener x story table both equal the grand mean; they differ when sessions are missing.

    >>> rows = [{"listener": 1, "story": 1, "ccc": 0.2}, {"listener": 1, "story": 2, "ccc": 0.4},
    ...         {"listener": 2, "story": 1, "ccc": 0.6}]
    >>> {k: round(v, 4) for k, v in ccc_protocols(rows).items()}
    {'personalized': 0.45, 'generalized': 0.4}
    """
    f = _protocol_frame(df)
    if f.empty:
        raise ValueError("CCC table is empty; there is nothing to average")
    return {
        "personalized": float(ccc_per_listener(f).mean()),
        "generalized": float(ccc_per_story(f).mean()),
    }


def concatenated_ccc(
    truth: Mapping[str, np.ndarray], predictions: Mapping[str, np.ndarray], sessions: Sequence[str]
) -> float:
    """The CCC of ``sessions`` concatenated (AVEC's averaging): one CCC over every frame with a
    finite label of those sessions, their labels ``truth`` against ``predictions``.

    >>> y = {"a": np.array([0.0, 1.0]), "b": np.array([2.0, 3.0])}
    >>> round(concatenated_ccc(y, y, ["a", "b"]), 6)
    1.0
    """
    ys = np.concatenate([np.asarray(truth[s], float) for s in sessions])
    ps = np.concatenate([np.asarray(predictions[s], float) for s in sessions])
    ok = np.isfinite(ys)
    return float(ccc(ys[ok], ps[ok]))


def ccc_matrix(rows: pd.DataFrame | Iterable[Mapping]) -> pd.DataFrame:
    """Per-session CCC as a listeners x stories table (NaN where a session is missing)."""
    f = _protocol_frame(rows)
    m = f.pivot(index="listener", columns="story", values="ccc")
    m.index.name, m.columns.name = "listener", "story"
    return m
