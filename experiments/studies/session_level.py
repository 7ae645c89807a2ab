"""Whole-session ratings: one value per session (``/session_labels/<target>``), predicted from
session-level summaries of the channels (:func:`session_table`), a small model grid
(:func:`model_grid`) cross-validated by person, scored across sessions (:func:`score`), with a
nested selection, logged to MLflow (:func:`run_sessions`). The config, what runs and how to
read it: docs/config.md, "Whole-session ratings"."""

from __future__ import annotations

import difflib
import itertools
import math
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats as sstats
from tqdm.auto import tqdm

from featurestore import Store
from featurestore.overrides import ConfigError

from ..data.folds import cv_folds
from ..evaluation import markdown
from ..evaluation.metrics import ccc
from ..evaluation.uncertainty import mean_interval
from ..tracking.tracker import Tracker

#: summary statistic -> function of (rows, columns) float array, ignoring NaN, per column
STATS = {
    "mean": lambda x: np.nanmean(x, axis=0),
    "std": lambda x: np.nanstd(x, axis=0),
    "median": lambda x: np.nanpercentile(x, 50, axis=0),
    "p10": lambda x: np.nanpercentile(x, 10, axis=0),
    "p90": lambda x: np.nanpercentile(x, 90, axis=0),
    "min": lambda x: np.nanmin(x, axis=0),
    "max": lambda x: np.nanmax(x, axis=0),
}
PROTOCOLS = ("lopo", "kfold_person")
#: model name -> its hyperparameters and their default values (each a list: the grid)
MODEL_PARAMS: dict[str, dict[str, list]] = {
    "mean": {},
    "ridge": {"alpha": [1.0]},
    "svr": {"C": [1.0]},
    "random_forest": {"n_estimators": [200], "max_depth": [None]},
    "xgboost": {"n_estimators": [200], "max_depth": [2], "learning_rate": [0.05]},
}
#: the config's keys and their defaults (``target`` has none)
DEFAULTS: dict[str, Any] = {
    "target": None,
    "channels": "all",
    "stats": ["mean", "std", "p10", "p90"],
    "protocol": "lopo",
    "folds": 5,
    "models": [
        {"name": "mean"},
        {"name": "ridge", "alpha": [1.0, 10.0, 100.0, 1000.0]},
        {"name": "svr", "C": [0.1, 1.0, 10.0]},
        {"name": "random_forest", "n_estimators": [200], "max_depth": [3]},
    ],
    "experiment": "session_level",
    "tracking_uri": "mlruns",
    "seed": 0,
    "nested": True,
}
LEVEL = 0.95


class SessionLevelError(ConfigError):
    """A session-level study that cannot run: a bad config, a store without the rating or the
    channels; the message names the file or session and the fix."""


@dataclass
class SessionLevelConfig:
    """A session-level study's settings (see :data:`DEFAULTS`)."""

    target: str
    channels: list[str] | str = "all"
    stats: list[str] = field(default_factory=lambda: list(DEFAULTS["stats"]))
    protocol: str = "lopo"
    folds: int = 5
    models: list[dict] = field(default_factory=lambda: [dict(m) for m in DEFAULTS["models"]])
    experiment: str = "session_level"
    tracking_uri: str = "mlruns"
    seed: int = 0
    nested: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in DEFAULTS}


def load_session_config(
    source: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> SessionLevelConfig:
    """A :class:`SessionLevelConfig` from a YAML file (or a mapping), checked.

    Raises:
        SessionLevelError: an unknown key (with the nearest known one), a missing ``target``, an
            unknown statistic, protocol or model, a model parameter that is not a list of values;
            each names the file and the key.
    """
    where = str(source) if not isinstance(source, Mapping) else "session config"
    if isinstance(source, Mapping):
        raw = dict(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise SessionLevelError(f"session-level config {path} does not exist; check the path")
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise SessionLevelError(f"{path}: malformed YAML ({e})") from e
        if not isinstance(raw, dict):
            raise SessionLevelError(f"{path}: expected a mapping of keys ({', '.join(DEFAULTS)})")
    raw.update(overrides or {})

    def bad(key: str, what: str) -> SessionLevelError:
        return SessionLevelError(f"{where}: {key}: {what}")

    for key in raw:
        if key not in DEFAULTS:
            near = difflib.get_close_matches(str(key), list(DEFAULTS), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(DEFAULTS)}"
            raise bad(str(key), f"unknown key{hint}")
    values = {**DEFAULTS, **raw}
    _check_values(values, bad)
    _check_models(values["models"], bad)
    return SessionLevelConfig(**values)


def _check_values(values: dict[str, Any], bad: Any) -> None:
    """Raise ``bad(key, what)`` for a bad target, channels, stats, protocol, folds or name."""
    if not isinstance(values["target"], str) or not values["target"]:
        raise bad("target", "missing; name the whole-session rating, e.g. target: empathy")
    channels = values["channels"]
    if channels != "all" and (
        not isinstance(channels, list) or not all(isinstance(c, str) and "/" in c for c in channels)
    ):
        raise bad("channels", f"expected `all` or a list of role/channel keys, got {channels!r}")
    st = values["stats"]
    if not isinstance(st, list) or not st or any(s not in STATS for s in st):
        raise bad("stats", f"expected a list of {', '.join(STATS)}, got {st!r}")
    if values["protocol"] not in PROTOCOLS:
        raise bad(
            "protocol",
            f"{values['protocol']!r}: a session-level study holds persons out: {' or '.join(PROTOCOLS)}",
        )
    folds = values["folds"]
    if not isinstance(folds, int) or isinstance(folds, bool) or folds < 2:
        raise bad("folds", f"expected an integer >= 2, got {folds!r}")
    if not isinstance(values["nested"], bool):
        raise bad("nested", f"expected true or false, got {values['nested']!r}")
    for key in ("experiment", "tracking_uri"):
        if not isinstance(values[key], str) or not values[key]:
            raise bad(key, f"expected a non-empty string, got {values[key]!r}")


def _check_models(models: Any, bad: Any) -> None:
    """Raise ``bad(key, what)`` for a model list that is not a grid of known models."""
    if not isinstance(models, list) or not models:
        raise bad("models", "expected a list of models, e.g. [{name: ridge, alpha: [1, 10]}]")
    for i, m in enumerate(models):
        if not isinstance(m, dict) or m.get("name") not in MODEL_PARAMS:
            raise bad(
                f"models.{i}",
                f"expected {{name: one of {', '.join(MODEL_PARAMS)}, ...}}, got {m!r}",
            )
        for k, v in m.items():
            if k == "name":
                continue
            if k not in MODEL_PARAMS[m["name"]]:
                known = ", ".join(MODEL_PARAMS[m["name"]]) or "none"
                raise bad(f"models.{i}.{k}", f"not a parameter of {m['name']} (known: {known})")
            if not isinstance(v, list) or not v:
                raise bad(f"models.{i}.{k}", f"expected a list of values (the grid), got {v!r}")


# ------------------------------------------------------------------------------ data
def rated_sessions(store: Store, target: str) -> pd.DataFrame:
    """The sessions with rating ``target`` (:meth:`Store.session_labels`), with ``person``.

    Raises:
        SessionLevelError: no session has it (the message lists the ratings the store has).
    """
    table = store.session_labels(target)
    if table.empty:
        have = sorted({t for s in store.list_sessions() for t in store.session_label_targets(s)})
        raise SessionLevelError(
            f"no session in {store.root} has a whole-session rating {target!r} (ratings there: "
            f"{', '.join(have) or 'none'}); add it with a manifest column `rating_{target}` "
            f"or `featurestore ratings FILE --store {store.root}`, or set target"
        )
    return table


def summarise_channel(data: np.ndarray, valid: np.ndarray, stats: Sequence[str]) -> np.ndarray:
    """The ``stats`` of each column of ``data`` over its ``valid`` rows, ignoring NaN (NaN for
    a column without any value), concatenated stat by stat.

    >>> d = np.array([[1.0, np.nan], [3.0, 2.0], [100.0, 100.0]])
    >>> summarise_channel(d, np.array([True, True, False]), ["mean", "std"]).tolist()
    [2.0, 2.0, 1.0, 0.0]
    """
    x = np.asarray(data, dtype=np.float64)[np.asarray(valid, dtype=bool)]
    out = []
    for s in stats:
        if x.shape[0] == 0:
            out.append(np.full(x.shape[1], np.nan))
            continue
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN column: NaN by design
            out.append(np.asarray(STATS[s](x), dtype=np.float64))
    return np.concatenate(out)


def session_table(
    store: Store,
    sessions: Sequence[str],
    channels: Sequence[str] | str,
    stats: Sequence[str],
    progress: bool = False,
) -> pd.DataFrame:
    """One row per session (index: session) of the summaries of ``channels`` (``all``: the
    channels every session has).

    Raises:
        SessionLevelError: a session lacks a channel asked for, or sessions share no channel.
    """
    if channels == "all":
        keys = [set(store.channel_keys(s)) for s in sessions]
        channels = sorted(set.intersection(*keys)) if keys else []
        if not channels:
            raise SessionLevelError(
                f"the rated sessions of {store.root} share no channel; extract channels first"
            )
    rows = []
    names: list[str] = []
    for s in tqdm(sessions, desc="session summaries", unit="session", disable=not progress):
        have = store.channel_keys(s)
        missing = [c for c in channels if c not in have]
        if missing:
            raise SessionLevelError(
                f"session {s} in {store.root} has no channel(s) {', '.join(missing)} (it has "
                f"{', '.join(have) or 'none'}); extract them or drop them from channels"
            )
        data = store.read_session(s, list(channels))
        row = []
        if not names:
            for c in channels:
                cols = data.channels[c].columns
                names += [f"{c}/{col}:{st}" for st in stats for col in cols]
        for c in channels:
            f = data.channels[c]
            row.append(summarise_channel(f.data, f.valid, stats))
        rows.append(np.concatenate(row))
    return pd.DataFrame(
        np.vstack(rows), index=pd.Index(list(sessions), name="session"), columns=names
    )


# ------------------------------------------------------------------------------ models
@dataclass(frozen=True)
class ModelSpec:
    """One configuration of the grid: a model name and its parameters."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        return self.name + "".join(f" {k}={v}" for k, v in self.params)

    def build(self, seed: int = 0) -> Any:
        """A fresh scikit-learn estimator (median imputation, scaling, the model)."""
        # scikit-learn loads when a model is built, not with the module (startup)
        from sklearn import dummy, ensemble, impute, linear_model, pipeline, preprocessing, svm

        p = dict(self.params)
        if self.name == "mean":
            return dummy.DummyRegressor(strategy="mean")
        if self.name == "ridge":
            model: Any = linear_model.Ridge(**p)
        elif self.name == "svr":
            model = svm.SVR(kernel="rbf", **p)
        elif self.name == "random_forest":
            model = ensemble.RandomForestRegressor(random_state=seed, n_jobs=1, **p)
        else:
            from xgboost import XGBRegressor  # about 1 s; only for an xgboost configuration

            model = XGBRegressor(random_state=seed, n_jobs=1, verbosity=0, **p)
        return pipeline.make_pipeline(
            impute.SimpleImputer(strategy="median"), preprocessing.StandardScaler(), model
        )


def model_grid(models: Sequence[Mapping[str, Any]]) -> list[ModelSpec]:
    """Every configuration of the config's ``models`` (the product of each model's lists).

    >>> [m.label for m in model_grid([{"name": "mean"}, {"name": "ridge", "alpha": [1, 10]}])]
    ['mean', 'ridge alpha=1', 'ridge alpha=10']
    """
    out = []
    for m in models:
        keys = [k for k in m if k != "name"]
        for combo in itertools.product(*(m[k] for k in keys)):
            out.append(ModelSpec(m["name"], tuple(zip(keys, combo, strict=True))))
    return out


def person_folds(persons: Sequence[int], protocol: str, folds: int) -> list[np.ndarray]:
    """Indices of the held-out sessions of each fold (sessions given by their person)."""
    items = [SimpleNamespace(listener=p, story=0, index=i) for i, p in enumerate(persons)]
    return [np.array([x.index for x in held]) for held in cv_folds(items, protocol, folds)]


def out_of_fold(
    spec: ModelSpec, x: np.ndarray, y: np.ndarray, folds: Sequence[np.ndarray], seed: int = 0
) -> np.ndarray:
    """Each session's prediction by the model fitted on the other folds' sessions."""
    pred = np.full(len(y), np.nan)
    for held in folds:
        train = np.setdiff1d(np.arange(len(y)), held)
        model = spec.build(seed)
        model.fit(x[train], y[train])
        pred[held] = model.predict(x[held])
    return pred


def nested_out_of_fold(
    grid: Sequence[ModelSpec],
    x: np.ndarray,
    y: np.ndarray,
    persons: np.ndarray,
    folds: Sequence[np.ndarray],
    protocol: str,
    n_folds: int,
    seed: int = 0,
    progress: bool = False,
) -> tuple[np.ndarray, list[str]]:
    """Each session's prediction by the configuration that an inner cross-validation by person
    over the other folds' sessions chose (best CCC, the first of the grid on a tie), refitted
    on them; and each fold's choice. The held-out persons take no part in the choice, so the
    score of these predictions is that of the whole procedure, grid search included."""
    pred = np.full(len(y), np.nan)
    chosen = []
    for held in tqdm(folds, desc="nested selection", unit="fold", disable=not progress):
        train = np.setdiff1d(np.arange(len(y)), held)
        inner = person_folds(list(persons[train]), protocol, n_folds)
        best, best_ccc = grid[0], -np.inf
        for spec in grid if len(inner) > 1 else grid[:1]:
            c = ccc(y[train], out_of_fold(spec, x[train], y[train], inner, seed))
            if np.isfinite(c) and c > best_ccc:
                best, best_ccc = spec, c
        model = best.build(seed)
        model.fit(x[train], y[train])
        pred[held] = model.predict(x[held])
        chosen.append(best.label)
    return pred, chosen


def score(y: np.ndarray, pred: np.ndarray, persons: Sequence[int] | np.ndarray) -> dict[str, float]:
    """Pearson r, CCC and MAE across sessions, with 95 % intervals for r (Fisher's z) and MAE
    (skewness-corrected t over persons' mean absolute errors), and the numbers of sessions and persons.

    >>> s = score(np.array([1.0, 2, 3, 4]), np.array([1.0, 2, 3, 4]), [1, 1, 2, 2])
    >>> round(s["r"], 3), round(s["ccc"], 3), s["mae"], s["n_sessions"], s["n_persons"]
    (1.0, 1.0, 0.0, 4, 2)
    """
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    n = len(y)
    r = float(np.corrcoef(y, pred)[0, 1]) if n > 2 and np.std(pred) > 0 and np.std(y) > 0 else 0.0
    if n > 3 and abs(r) < 1:
        z, half = math.atanh(r), sstats.norm.ppf(0.5 + LEVEL / 2) / math.sqrt(n - 3)
        r_low, r_high = math.tanh(z - half), math.tanh(z + half)
    else:
        r_low = r_high = math.nan if n <= 3 else r
    err = pd.Series(np.abs(y - pred)).groupby(np.asarray(persons)).mean().to_numpy()
    if len(err) >= 3:
        mae_low, mae_high = mean_interval(err, LEVEL, (0.0, np.inf))
    else:
        mae_low = mae_high = math.nan
    return {
        "r": r,
        "r_ci_low": r_low,
        "r_ci_high": r_high,
        "ccc": float(ccc(y, pred)),
        "mae": float(np.mean(np.abs(y - pred))),
        "mae_ci_low": float(mae_low),
        "mae_ci_high": float(mae_high),
        "n_sessions": n,
        "n_persons": len(err),
    }


# ------------------------------------------------------------------------------ study
@dataclass
class SessionLevelResult:
    """A session-level study: one row per configuration (``table``, best CCC first), the
    out-of-fold predictions by configuration label, the MLflow runs and the files written."""

    table: pd.DataFrame
    predictions: dict[str, pd.DataFrame]
    parent_run_id: str
    child_run_ids: dict[str, str]
    files: list[Path]
    n_sessions: int
    n_persons: int
    #: the nested selection's scores (:func:`nested_out_of_fold`) and each fold's choice;
    #: empty when ``nested`` is off
    nested: dict[str, float] = field(default_factory=dict)
    nested_choices: list[str] = field(default_factory=list)


def run_sessions(
    cfg: SessionLevelConfig,
    store: str | Path | Store,
    out_dir: str | Path = "reports",
    tracking_uri: str | None = None,
    progress: bool = True,
) -> SessionLevelResult:
    """Cross-validate every configuration of ``cfg.models`` on the whole-session rating
    ``cfg.target`` (see the module docstring), logged to MLflow and to ``out_dir``.

    Raises:
        SessionLevelError: no session has the rating, a channel is missing, or there are fewer
            than 2 persons (no fold can hold one out).
    """
    st = store if isinstance(store, Store) else Store(store)
    rated = rated_sessions(st, cfg.target)
    persons = rated["listener"].to_numpy()
    if len(set(persons)) < 2:
        raise SessionLevelError(
            f"the {len(rated)} session(s) rated {cfg.target!r} in {st.root} are of one person; "
            "cross-validation by person needs at least 2"
        )
    x_table = session_table(st, list(rated["session"]), cfg.channels, cfg.stats, progress)
    x, y = x_table.to_numpy(), rated["value"].to_numpy(dtype=float)
    folds = person_folds(list(persons), cfg.protocol, cfg.folds)
    grid = model_grid(cfg.models)
    n_sessions, n_persons = len(y), len(set(persons))
    tracker = Tracker(tracking_uri or cfg.tracking_uri, cfg.experiment)
    parent = tracker.start_run(f"sessions-{cfg.target}", tags={"study": "session_level"})
    tracker.log(
        parent,
        params={
            "target": cfg.target,
            "protocol": cfg.protocol,
            "folds": len(folds),
            "stats": ",".join(cfg.stats),
            "channels": ",".join(sorted({c.rsplit("/", 2)[0] for c in x_table.columns})),
            "n_features": x.shape[1],
            "n_configs": len(grid),
        },
        metrics={"n_sessions": n_sessions, "n_persons": n_persons},
    )
    rows, preds, children = [], {}, {}
    try:
        for spec in tqdm(grid, desc=f"sessions {cfg.target}", unit="config", disable=not progress):
            t0 = time.perf_counter()
            pred = out_of_fold(spec, x, y, folds, cfg.seed)
            scores = score(y, pred, persons)
            seconds = time.perf_counter() - t0
            oof = rated[["session", "listener", "story"]].assign(rating=y, prediction=pred)
            child = tracker.start_run(spec.label, parent_id=parent, tags={"study": "session_level"})
            tracker.log(
                child,
                params={"model": spec.name, **dict(spec.params), "target": cfg.target},
                metrics={**scores, "fit_seconds": seconds},
            )
            with tempfile.TemporaryDirectory() as tmp:
                oof.to_csv(Path(tmp) / "oof.csv", index=False)
                tracker.log_artifacts(child, tmp)
            tracker.finish(child)
            rows.append({"config": spec.label, "model": spec.name, **scores, "run_id": child})
            preds[spec.label] = oof
            children[spec.label] = child
        table = pd.DataFrame(rows).sort_values("ccc", ascending=False, kind="stable")
        table = table.reset_index(drop=True)
        nested: dict[str, float] = {}
        choices: list[str] = []
        if cfg.nested:
            npred, choices = nested_out_of_fold(
                grid, x, y, persons, folds, cfg.protocol, cfg.folds, cfg.seed, progress
            )
            nested = score(y, npred, persons)
            tracker.log(parent, metrics={f"nested_{k}": v for k, v in nested.items()})
            with tempfile.TemporaryDirectory() as tmp:
                rated[["session", "listener", "story"]].assign(rating=y, prediction=npred).to_csv(
                    Path(tmp) / "nested_oof.csv", index=False
                )
                tracker.log_artifacts(parent, tmp)
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        files = [out / "summary_sessions.csv", out / "summary_sessions.md"]
        table.to_csv(files[0], index=False)
        files[1].write_text(
            sessions_markdown(cfg, table, n_sessions, n_persons, len(folds), nested, choices)
        )
        with tempfile.TemporaryDirectory() as tmp:
            table.to_csv(Path(tmp) / "summary.csv", index=False)
            (Path(tmp) / "summary.md").write_text(files[1].read_text())
            tracker.log_artifacts(parent, tmp)
        best = table.iloc[0]
        tracker.log(
            parent,
            metrics={f"best_{k}": float(best[k]) for k in ("r", "ccc", "mae")},
            tags={"best_run_id": best["run_id"], "best_config": best["config"]},
        )
    except BaseException:
        tracker.finish(parent, "FAILED")
        raise
    tracker.finish(parent)
    return SessionLevelResult(
        table, preds, parent, children, files, n_sessions, n_persons, nested, choices
    )


def sessions_markdown(
    cfg: SessionLevelConfig,
    table: pd.DataFrame,
    n_sessions: int,
    n_persons: int,
    n_folds: int,
    nested: Mapping[str, float] | None = None,
    choices: Sequence[str] = (),
) -> str:
    """The study's report: its data, then one line per configuration, best CCC first."""
    lines = [
        f"# Whole-session rating `{cfg.target}`",
        "",
        f"{n_sessions} sessions of {n_persons} persons; protocol `{cfg.protocol}` "
        f"({n_folds} folds, a person's sessions all in one fold); summaries "
        f"{', '.join(cfg.stats)} of the channels' valid rows. Scores are over the out-of-fold "
        "predictions of every session, with 95 % intervals: r by Fisher's z over sessions "
        "(too narrow when a person's sessions are alike), MAE by a skewness-corrected t over persons. The best row "
        "is chosen on the folds it is scored on: an optimistic estimate, to read against the "
        "`mean` baseline and the nested selection.",
        "",
    ]
    rows = (
        [r.config, _with_interval(r, "r"), f"{r.ccc:.3f}", _with_interval(r, "mae")]
        for r in table.itertuples()
    )
    lines += markdown.table(["configuration", "Pearson r", "CCC", "MAE"], rows)
    if nested:
        counts = pd.Series(list(choices)).value_counts()
        lines += [
            "",
            f"**Nested selection** (each fold's configuration chosen by an inner cross-validation "
            f"over its training persons, then scored on the held-out ones): Pearson r "
            f"{markdown.interval(nested['r'], nested['r_ci_low'], nested['r_ci_high'])}, CCC "
            f"{nested['ccc']:.3f}, MAE "
            f"{markdown.interval(nested['mae'], nested['mae_ci_low'], nested['mae_ci_high'])}; chosen: "
            + ", ".join(f"{label} ({n} of {len(choices)} folds)" for label, n in counts.items()),
        ]
    return "\n".join(lines) + "\n"


def _with_interval(row: Any, name: str) -> str:
    """The score ``name`` of a table row with its 95 % interval where it has one."""
    return markdown.interval(
        getattr(row, name), getattr(row, f"{name}_ci_low"), getattr(row, f"{name}_ci_high")
    )
