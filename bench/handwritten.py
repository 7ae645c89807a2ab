"""The ablation's job written by hand, as a researcher would without this package.

A plain loop over configurations with pandas and scikit-learn: read each session's feature
tables, bring them onto the 25 fps label frames, window them with ``DataFrame.rolling``, fit,
predict, smooth, rescale and score the CCC. It imports nothing from ``featurestore`` or
``experiments``; :mod:`bench.anchor` times it against ``experiments ablate`` on the same
configurations and checks that both give the same numbers.

    python -m bench.handwritten --tables DIR --plan plan.json --out scores.csv

**Input** (``--tables``): a folder per session, ``Subject_<L>_Story_<S>/``, holding one Parquet
table per channel at that channel's own rate (a ``time`` column in seconds, a valid column,
the feature columns; the speaker's and listener's eGeMAPS rows are the same audio, one table
with a valid column per role) and ``labels.parquet`` (one row per label frame, 25 fps);
``manifest.json`` names each channel's file and valid column. This is what
``bench.loading.export_tables`` writes from a store: the per-session tables a researcher keeps
their features in.

**Plan** (``--plan``, JSON): ``target``, ``splits`` (split -> stories) and ``configurations``,
each a flat dict: ``id``, ``channels``, ``lengths_s``, ``delay_s``, ``align``, ``stats``,
``hop_s``, ``model``, ``params`` (every hyperparameter), ``personalization`` (``global`` or
``per_listener``), ``smooth_s``, ``smooth_method`` (``moving_average``), ``rescale``,
``fit_on`` (``out_of_fold``), ``seed``.

**Output** (``--out``, CSV): one row per configuration, its ``id`` and
``<split>.ccc_<averaging>`` for split val and test, averaging personalized (per listener, then
over listeners) and generalized (per story, then over stories); ``--seconds`` (JSON): the time
spent reading, windowing, in the models (fit and predict; ``models.<name>`` per model) and in
scoring.

The loop is nested the way such a script is: windows once per feature set and window lengths,
a model fitted once for the post-processing variants that share it (smoothing and rescaling do
not change the fit). Where the package made a choice a researcher could make otherwise
(an edge rule, a rounding), the loop makes the same one, plainly, with a comment: the point is
to compare times on the same results.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.dummy import DummyRegressor
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVR

FPS = 25.0  # label frames per second
MAX_GAP_S = 0.5  # linear interpolation never bridges a longer gap between valid samples (s)
SESSION = re.compile(r"Subject_(\d+)_Story_(\d+)$")
#: what decides the windowed features, and what decides the fitted models
WINDOW = ("channels", "lengths_s", "delay_s", "align", "stats")
FIT = (*WINDOW, "hop_s", "model", "params", "personalization", "fit_on", "seed")


# --- 1. features onto the label frames ------------------------------------------------------


def channel_frames(table: pd.DataFrame, valid: str, columns: list[str], n: int) -> pd.DataFrame:
    """One channel on label frames ``0 .. n - 1`` (frame ``i`` at ``i / FPS`` s), NaN where it has no data."""
    ok = table[valid].to_numpy(bool)
    samples = table.loc[ok, columns].set_axis(table.time[ok].to_numpy())
    step = float(np.median(np.diff(table.time)))
    if step < 0.75 / FPS:
        # faster than the frames (eGeMAPS every 10 ms): the mean of the samples nearest each frame
        nearest = np.floor(samples.index.to_numpy() * FPS + 0.5).astype(int)
        return samples.groupby(nearest).mean().reindex(range(n)).reset_index(drop=True)
    return interpolated(samples, n, hold_s=max(step, 1 / FPS) / 2)


def interpolated(samples: pd.DataFrame, n: int, hold_s: float) -> pd.DataFrame:
    """Linear interpolation of a slow channel (faces, 5 fps) onto the frames, with the package's
    gap rule: only between valid samples at most ``MAX_GAP_S`` apart; elsewhere a frame takes the
    nearest sample (the earlier one on a tie) if it is within ``hold_s``, else nothing. Times are
    compared with 1e-9 s of slack, as float seconds are."""
    t = pd.Index(np.arange(n) / FPS)
    grid = samples.reindex(samples.index.union(t))
    line = grid.interpolate(method="index", limit_area="inside").reindex(t).to_numpy()
    when = pd.Series(samples.index, index=samples.index).reindex(grid.index)
    before = when.ffill().reindex(t).to_numpy()  # the last valid sample at or before each frame (s)
    after = when.bfill().reindex(t).to_numpy()  # the first one at or after it
    span = after - before <= MAX_GAP_S + 1e-9  # NaN (no sample on one side) compares False
    to_before = np.where(np.isnan(before), np.inf, t - before)
    to_after = np.where(np.isnan(after), np.inf, after - t)
    take_before = ~span & (to_before <= hold_s + 1e-9) & (to_before <= to_after)
    take_after = ~span & ~take_before & (to_after <= hold_s + 1e-9)
    out = np.where(span[:, None], line, np.nan)
    out[take_before] = grid.ffill().reindex(t).to_numpy()[take_before]
    out[take_after] = grid.bfill().reindex(t).to_numpy()[take_after]
    return pd.DataFrame(out, columns=samples.columns)


def read_sessions(
    tables: Path, channels: list[str], target: str, splits: dict[str, list[int]]
) -> list[dict]:
    """Every session of a split: its frame table (columns ``role/channel/name``), labels and ids,
    ordered by listener then story."""
    manifest = json.loads((tables / "manifest.json").read_text())
    split_of = {int(story): split for split, stories in splits.items() for story in stories}
    sessions = []
    for name, files in manifest.items():
        listener, story = map(int, SESSION.match(name).groups())
        if story not in split_of:
            continue
        folder = tables / name
        y = pd.read_parquet(folder / "labels.parquet", columns=[target])[target].to_numpy()
        read = {}  # a file read once even when two channels (speaker and listener eGeMAPS) share it
        parts = []
        for key in channels:
            entry = files[key]
            if entry["file"] not in read:
                read[entry["file"]] = pd.read_parquet(folder / entry["file"])
            part = channel_frames(read[entry["file"]], entry["valid"], entry["columns"], len(y))
            parts.append(part.set_axis([f"{key}/{c}" for c in entry["columns"]], axis=1))
        sessions.append(
            {
                "session": name,
                "listener": listener,
                "story": story,
                "split": split_of[story],
                "frames": pd.concat(parts, axis=1).astype(np.float32),
                "y": y,
            }
        )
    return sorted(sessions, key=lambda s: (s["listener"], s["story"]))


# --- 2. windows ------------------------------------------------------------------------------


def windowed(
    frames: pd.DataFrame, lengths_s: list[float], delay_s: float, align: str, stats: list[str]
) -> pd.DataFrame:
    """Window statistics of every column for every frame (columns ordered length, statistic, column).

    Frame ``t`` gets the window placed at ``t - delay`` (centred on it, or ending there). Windows
    are cut to the session and skip missing values; ``std`` is the population one (ddof 0).
    """
    n = len(frames)
    # the window of frame t is the one placed at t - delay: missing frames in front, so that the
    # first frames' windows keep what they cover of the session (the package's edge rule)
    x = frames.reindex(range(-round(delay_s * FPS), n)).reset_index(drop=True)
    parts = []
    for length in lengths_s:
        w = max(1, round(length * FPS))
        # a centred window has as many frames before as after its centre: 2 * (w // 2) + 1
        size, centred = (2 * (w // 2) + 1, True) if align == "centred" else (w, False)
        roll = x.rolling(size, center=centred, min_periods=1)
        for stat in stats:
            if stat == "slope":
                value = slope(x, size, centred)
            elif stat == "std":
                value = roll.std(ddof=0)
            elif stat in ("mean", "min", "max"):
                value = getattr(roll, stat)()
            else:
                raise ValueError(f"statistic {stat!r} is not written by hand here")
            parts.append(value.iloc[:n].add_suffix(f":{stat}@{length:g}s"))
    # float32 like the package's feature matrices (half the memory of float64)
    return pd.concat(parts, axis=1).reset_index(drop=True).astype(np.float32)


def slope(x: pd.DataFrame, size: int, centred: bool) -> pd.DataFrame:
    """Least-squares slope (units per second) of each window's present values against time;
    NaN with fewer than two. From rolling sums: frame indices are integers, so their sums are exact."""
    k = pd.Series(np.arange(len(x), dtype=float))
    present = x.notna()
    k_present = present.mul(k, axis=0).where(present)

    def total(values: pd.DataFrame) -> pd.DataFrame:
        return values.rolling(size, center=centred, min_periods=2).sum()

    count = present.astype(float).rolling(size, center=centred, min_periods=1).sum()
    sk, skk = total(k_present), total(k_present * k_present)
    return (count * total(x.mul(k, axis=0)) - sk * total(x)) / (count * skk - sk * sk) * FPS


# --- 3. models -------------------------------------------------------------------------------


def estimator(name: str, p: dict, seed: int):
    """A fresh scikit-learn (or XGBoost) regressor: linear models get median imputation and
    standardisation; trees take NaN as it is."""
    if name == "dummy":
        return DummyRegressor(strategy="mean")
    if name == "ridge":
        return make_pipeline(
            SimpleImputer(strategy="median", keep_empty_features=True),
            StandardScaler(),
            Ridge(alpha=p["alpha"]),
        )
    if name == "linear_svr":
        return make_pipeline(
            SimpleImputer(strategy="median", keep_empty_features=True),
            StandardScaler(),
            LinearSVR(
                C=p["C"],
                epsilon=p["epsilon"],
                loss=p["loss"],
                dual="auto",
                max_iter=p["max_iter"],
                random_state=seed,
            ),
        )
    if name == "hist_gb":
        return HistGradientBoostingRegressor(
            max_iter=p["max_iter"],
            learning_rate=p["learning_rate"],
            max_depth=p["max_depth"],
            early_stopping=False,
            random_state=seed,
        )
    if name == "xgboost":
        from xgboost import XGBRegressor

        return XGBRegressor(
            n_estimators=p["n_estimators"],
            max_depth=p["max_depth"],
            learning_rate=p["learning_rate"],
            subsample=p["subsample"],
            colsample_bytree=p["colsample_bytree"],
            tree_method="hist",
            n_jobs=p["n_jobs"],
            random_state=seed,
        )
    if name == "position_prior":
        return PositionCurve(p.get("n_bins", 100))
    raise ValueError(f"model {name!r} is not written by hand here")


class PositionCurve:
    """The mean training label per bin of session position (``i / (n_frames - 1)``), linear
    between bin centres; bins without rows take the curve interpolated from their neighbours."""

    def __init__(self, n_bins: int):
        self.n = n_bins
        self.centres = (np.arange(n_bins) + 0.5) / n_bins

    def fit(self, X: np.ndarray, y: np.ndarray) -> PositionCurve:
        u = np.clip(X[:, 0], 0.0, 1.0)
        bins = np.minimum((u * self.n).astype(np.int64), self.n - 1)
        counts = np.bincount(bins, minlength=self.n)
        sums = np.bincount(bins, y, minlength=self.n)
        seen = counts > 0
        self.curve = np.interp(self.centres, self.centres[seen], sums[seen] / counts[seen])
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.interp(np.clip(X[:, 0], 0.0, 1.0), self.centres, self.curve)


def inputs(cfg: dict, session: dict, features: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """A session's model inputs: its windowed features, or for the position prior the one column
    of each frame's position in the session."""
    if cfg["model"] == "position_prior":
        n = len(session["y"])
        return pd.DataFrame({"position": np.arange(n, dtype=np.float64) / max(n - 1, 1)})
    return features[session["session"]]


def fit(cfg: dict, train: list[dict], features: dict[str, pd.DataFrame]) -> dict:
    """Fitted models: ``{None: model}`` (global) or one per listener (``per_listener``), on every
    ``hop_s``-th frame of the training sessions with a finite label. (The package's per-listener
    model also fits a global one, for listeners with under 50 training rows; every listener here
    has hundreds, so the loop leaves it out.)"""
    hop = max(1, round(cfg["hop_s"] * FPS))
    # float64, as scikit-learn would make it anyway (the feature tables are float32)
    X = pd.concat([inputs(cfg, s, features).iloc[::hop] for s in train]).to_numpy(np.float64)
    y = np.concatenate([s["y"][::hop] for s in train])
    listener = np.concatenate([np.full(len(s["y"][::hop]), s["listener"]) for s in train])
    ok = np.isfinite(y)
    X, y, listener = X[ok], y[ok], listener[ok]
    if cfg["personalization"] == "global":
        return {None: estimator(cfg["model"], cfg["params"], cfg["seed"]).fit(X, y)}
    if cfg["personalization"] == "per_listener":
        return {
            who: estimator(cfg["model"], cfg["params"], cfg["seed"]).fit(
                X[listener == who], y[listener == who]
            )
            for who in np.unique(listener)
        }
    raise ValueError(f"personalization {cfg['personalization']!r} is not written by hand here")


def predict(
    cfg: dict, models: dict, session: dict, features: dict[str, pd.DataFrame]
) -> np.ndarray:
    model = models.get(session["listener"], models.get(None))
    return model.predict(inputs(cfg, session, features).to_numpy(np.float64))


def predictions(
    cfg: dict, sessions: list[dict], features: dict[str, pd.DataFrame], out_of_fold: bool
) -> dict[str, np.ndarray]:
    """Per session, its raw predictions: validation and test by the model fitted on the training
    stories; with ``out_of_fold``, each training story by a model fitted on the other ones (what
    rescaling is fitted on)."""
    train = [s for s in sessions if s["split"] == "train"]
    models = fit(cfg, train, features)
    out = {
        s["session"]: predict(cfg, models, s, features) for s in sessions if s["split"] != "train"
    }
    if out_of_fold:
        for story in sorted({s["story"] for s in train}):
            models = fit(cfg, [s for s in train if s["story"] != story], features)
            out.update(
                {
                    s["session"]: predict(cfg, models, s, features)
                    for s in train
                    if s["story"] == story
                }
            )
    return out


# --- 4. post-processing and scores -------------------------------------------------------------


def smoothed(pred: np.ndarray, smooth_s: float, method: str) -> np.ndarray:
    """Centred moving average over an odd number of frames, shrinking at the session's ends."""
    if method != "moving_average":
        raise ValueError(f"smoothing {method!r} is not written by hand here")
    w = 2 * (round(smooth_s * FPS) // 2) + 1
    return (
        pred if w == 1 else pd.Series(pred).rolling(w, center=True, min_periods=1).mean().to_numpy()
    )


def rescaled(pred: np.ndarray, listener: int, fitted: pd.DataFrame, mode: str) -> np.ndarray:
    """``pred`` moved onto the training labels' mean (and std) from training predictions
    ``fitted`` (columns listener, y, p): over all listeners, or the session's listener's own."""
    if mode == "none":
        return pred
    if mode.startswith("listener"):
        own = fitted[fitted.listener == listener]
        fitted = own if len(own) >= 2 else fitted  # a listener without training rows: everyone's
    mean, std = fitted[["y", "p"]].mean(), fitted[["y", "p"]].std(ddof=0)
    if mode in ("bias", "listener_bias"):
        return pred - mean.p + mean.y
    scale = std.y / std.p if std.p > 1e-12 else 1.0  # constant predictions: shift only
    return (pred - mean.p) * scale + mean.y


def ccc(y: np.ndarray, p: np.ndarray) -> float:
    """Lin's concordance correlation coefficient (population statistics; r = 0 when undefined)."""
    r = np.corrcoef(y, p)[0, 1] if y.min() != y.max() and p.min() != p.max() else 0.0
    return float(2 * r * y.std() * p.std() / (y.var() + p.var() + (y.mean() - p.mean()) ** 2))


def scores(cfg: dict, sessions: list[dict], raw: dict[str, np.ndarray]) -> dict[str, float]:
    """Both averagings of the per-session CCC on validation and test, after post-processing."""
    post = {sid: smoothed(p, cfg["smooth_s"], cfg["smooth_method"]) for sid, p in raw.items()}
    train = [s for s in sessions if s["split"] == "train"]
    fitted = None
    if cfg["rescale"] != "none":
        fitted = pd.DataFrame(
            {
                "listener": np.concatenate([np.full(len(s["y"]), s["listener"]) for s in train]),
                "y": np.concatenate([s["y"] for s in train]),
                "p": np.concatenate([post[s["session"]] for s in train]),
            }
        ).dropna(subset=["y"])
    rows = []
    for s in sessions:
        if s["split"] == "train":
            continue
        p = rescaled(post[s["session"]], s["listener"], fitted, cfg["rescale"])
        ok = np.isfinite(s["y"])
        rows.append(
            {
                "listener": s["listener"],
                "story": s["story"],
                "split": s["split"],
                "ccc": ccc(s["y"][ok], p[ok]),
            }
        )
    table = pd.DataFrame(rows)
    out = {}
    for split, part in table.groupby("split"):
        out[f"{split}.ccc_personalized"] = part.groupby("listener").ccc.mean().mean()
        out[f"{split}.ccc_generalized"] = part.groupby("story").ccc.mean().mean()
    return out


# --- the loop ------------------------------------------------------------------------------------


def grouped(configs: list[dict], keys: tuple[str, ...]) -> list[list[dict]]:
    """``configs`` grouped by the values of ``keys`` (first appearance order)."""
    groups: dict[str, list[dict]] = {}
    for cfg in configs:
        groups.setdefault(json.dumps([cfg[k] for k in keys]), []).append(cfg)
    return list(groups.values())


def run(tables: Path, plan: dict, log=print) -> tuple[pd.DataFrame, dict[str, float]]:
    """Every configuration of ``plan``: one row of scores per configuration, and the seconds spent
    reading, windowing, fitting and predicting (``models``), post-processing and scoring."""
    t0 = time.perf_counter()
    seconds = dict.fromkeys(("read", "windows", "models", "scores"), 0.0)
    configs = plan["configurations"]
    channels = sorted({c for cfg in configs for c in cfg["channels"]})
    sessions = read_sessions(tables, channels, plan["target"], plan["splits"])
    seconds["read"] = time.perf_counter() - t0
    log(f"handwritten: {len(sessions)} sessions read in {seconds['read']:.1f} s")
    rows = []
    for group in grouped(configs, WINDOW):
        first = group[0]
        t1 = time.perf_counter()
        wanted = tuple(f"{c}/" for c in first["channels"])
        features = {
            s["session"]: windowed(
                s["frames"].loc[:, s["frames"].columns.str.startswith(wanted)],
                first["lengths_s"],
                first["delay_s"],
                first["align"],
                first["stats"],
            )
            for s in sessions
        }
        seconds["windows"] += time.perf_counter() - t1
        log(
            f"handwritten: windows {first['channels']} {first['lengths_s']} s in {time.perf_counter() - t1:.1f} s"
        )
        for same_fit in grouped(group, FIT):
            t2 = time.perf_counter()
            raw = predictions(
                same_fit[0], sessions, features, any(c["rescale"] != "none" for c in same_fit)
            )
            t3 = time.perf_counter()
            rows += [{"id": cfg["id"], **scores(cfg, sessions, raw)} for cfg in same_fit]
            seconds["models"] += t3 - t2
            model = (
                f"models.{same_fit[0]['model']}"  # the same per model, to see where the time goes
            )
            seconds[model] = seconds.get(model, 0.0) + t3 - t2
            seconds["scores"] += time.perf_counter() - t3
            log(
                f"handwritten: {same_fit[0]['model']} {same_fit[0]['personalization']}, {len(same_fit)} "
                f"configurations in {time.perf_counter() - t2:.1f} s"
            )
        del features
    seconds["total"] = time.perf_counter() - t0
    log(f"handwritten: {len(rows)} configurations in {seconds['total']:.1f} s")
    return pd.DataFrame(rows), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.handwritten", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--tables", type=Path, required=True, help="per-session Parquet tables and manifest.json"
    )
    parser.add_argument(
        "--plan", type=Path, required=True, help="JSON: target, splits, configurations"
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="CSV of scores, one row per configuration"
    )
    parser.add_argument(
        "--seconds",
        type=Path,
        help="JSON of the seconds spent per step (read, windows, models, scores)",
    )
    args = parser.parse_args(argv)
    table, seconds = run(
        args.tables, json.loads(args.plan.read_text()), log=lambda m: print(m, flush=True)
    )
    table.to_csv(args.out, index=False, float_format="%.17g")
    if args.seconds:
        args.seconds.write_text(json.dumps(seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
