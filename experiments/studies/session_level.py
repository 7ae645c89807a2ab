"""Whole-session ratings: one value per session (``/session_labels/<target>``) predicted from
session-level summaries of the channels (:func:`session_table`) by the registered models, in folds
of whole persons, logged and resumed as the sweep's runs: docs/config.md, "Whole-session ratings"."""

from __future__ import annotations

import itertools
import math
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sstats
from tqdm.auto import tqdm

from featurestore import Store
from featurestore.errors import ConfigError
from featurestore.storage.roles import corpus_key, store_key

from ..config.metrics import DEFAULT_METRIC, get_metric
from ..config.models import resolve_model_params
from ..config.schema import config_hash
from ..config.store_check import corpus_layout
from ..data.folds import cv_folds
from ..evaluation import markdown
from ..evaluation.uncertainty import LEVEL, mean_interval
from ..models.factory import make_model
from ..tracking.provenance import code_version
from ..tracking.summary import log_files
from ..tracking.tracker import CONFIG_HASH_TAG, Tracker
from .inter_rater import as_store
from .parent_run import store_fingerprint
from .session_config import STATS, SessionLevelConfig


# ------------------------------------------------------------------------------ data
def rated_sessions(store: Store, target: str) -> pd.DataFrame:
    """The sessions with rating ``target`` (:meth:`Store.session_labels`); ConfigError when none has it."""
    table = store.session_labels(target)
    if table.empty:
        have = sorted({t for s in store.list_sessions() for t in store.session_label_targets(s)})
        raise ConfigError(
            f"no session in {store.root} has a whole-session rating {target!r} (ratings there: "
            f"{', '.join(have) or 'none'}); add it with a manifest column `rating_{target}` "
            f"or `featurestore ratings FILE --store {store.root}`, or set target"
        )
    return table.reset_index(drop=True)


def summarise_channel(data: np.ndarray, valid: np.ndarray, stats: Sequence[str]) -> np.ndarray:
    """The ``stats`` of each column of ``data`` over its ``valid`` rows, ignoring NaN, stat by stat.

    >>> d = np.array([[1.0, np.nan], [3.0, 2.0], [100.0, 100.0]])
    >>> summarise_channel(d, np.array([True, True, False]), ["mean", "std"]).tolist()
    [2.0, 2.0, 1.0, 0.0]
    """
    x = np.asarray(data, dtype=np.float64)[np.asarray(valid, dtype=bool)]
    if x.shape[0] == 0:
        return np.full(x.shape[1] * len(stats), np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN column: NaN by design
        return np.concatenate([np.asarray(STATS[s](x), dtype=np.float64) for s in stats])


def session_table(
    store: Store,
    sessions: Sequence[str],
    channels: Sequence[str] | str,
    stats: Sequence[str],
    progress: bool = False,
) -> pd.DataFrame:
    """One row per session of the summaries of ``channels`` (``all``: those every session has; in
    the store's or the corpus's words), columns ``<role>/<channel>/<column>:<stat>``; ConfigError
    when a session lacks one, or the sessions share none."""
    if channels == "all":
        channels = sorted(set.intersection(*(set(store.channel_keys(s)) for s in sessions)))
        if not channels:
            raise ConfigError(
                f"the rated sessions of {store.root} share no channel; extract channels first"
            )
    else:
        channels = [store_key(c) for c in channels]
    rows: list[np.ndarray] = []
    names: list[str] = []
    for s in tqdm(sessions, desc="session summaries", unit="session", disable=not progress):
        have = store.channel_keys(s)
        if missing := [c for c in channels if c not in have]:
            raise ConfigError(
                f"session {s} in {store.root} has no channel(s) {', '.join(missing)} (it has "
                f"{', '.join(have) or 'none'}); extract them or drop them from channels"
            )
        read = store.read_session(s, list(channels)).channels
        names = names or [
            f"{c}/{col}:{st}" for c in channels for st in stats for col in read[c].columns
        ]
        summaries = [summarise_channel(read[c].data, read[c].valid, stats) for c in channels]
        rows.append(np.concatenate(summaries))
    index = pd.Index(list(sessions), name="session")
    return pd.DataFrame(np.vstack(rows), index=index, columns=names)


# ------------------------------------------------------------------------------ models
@dataclass(frozen=True)
class Candidate:
    """One configuration of the grid: a registered model's name and its hyperparameters."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        """``ridge alpha=10``"""
        return self.name + "".join(f" {k}={v}" for k, v in self.params)

    def build(self, seed: int = 0) -> Any:
        """A fresh pipeline of the model."""
        return make_model(self.name, dict(self.params), seed)


def model_grid(models: Sequence[Mapping[str, Any]]) -> list[Candidate]:
    """Every configuration of the config's ``models`` (the product of each model's lists).

    >>> [m.label for m in model_grid([{"name": "dummy"}, {"name": "ridge", "alpha": [1, 10]}])]
    ['dummy', 'ridge alpha=1', 'ridge alpha=10']
    """
    out = []
    for m in models:
        keys = [k for k in m if k != "name"]
        for combo in itertools.product(*(m[k] for k in keys)):
            out.append(Candidate(m["name"], tuple(zip(keys, combo, strict=True))))
    return out


def person_folds(
    persons: Sequence[int] | np.ndarray, protocol: str, folds: int
) -> list[np.ndarray]:
    """Positions of the held-out sessions of each fold of ``protocol`` (sessions by their person)."""
    sessions = list(pd.DataFrame({"listener": list(persons), "story": 0}).itertuples())
    return [np.array([s.Index for s in held]) for held in cv_folds(sessions, protocol, folds)]


def out_of_fold(
    c: Candidate, x: np.ndarray, y: np.ndarray, folds: Sequence[np.ndarray], seed: int = 0
) -> np.ndarray:
    """Each session's prediction by the model fitted on the other folds' sessions."""
    pred = np.full(len(y), np.nan)
    for held in folds:
        train = np.setdiff1d(np.arange(len(y)), held)
        pred[held] = c.build(seed).fit(x[train], y[train]).predict(x[held])
    return pred


def nested_out_of_fold(
    grid: Sequence[Candidate], data: _Data, cfg: SessionLevelConfig, progress: bool = False
) -> tuple[np.ndarray, list[str]]:
    """Each session's prediction by the configuration an inner cross-validation by person over
    the other folds chose (best metric, the first on a tie), refitted on them; each fold's choice."""
    x, y, seed = data.x, data.y, cfg.seed
    m, pred, chosen = get_metric(cfg.metric), np.full(len(y), np.nan), []
    for held in tqdm(data.folds, desc="nested selection", unit="fold", disable=not progress):
        train = np.setdiff1d(np.arange(len(y)), held)
        inner = person_folds(data.persons[train], cfg.protocol, cfg.folds)
        candidates = grid if len(inner) > 1 else grid[:1]
        values = [m(y[train], out_of_fold(c, x[train], y[train], inner, seed)) for c in candidates]
        best = candidates[m.best_index(values)] if np.isfinite(values).any() else grid[0]
        pred[held] = best.build(seed).fit(x[train], y[train]).predict(x[held])
        chosen.append(best.label)
    return pred, chosen


def score(
    y: np.ndarray,
    pred: np.ndarray,
    persons: Sequence[int] | np.ndarray,
    metric: str = DEFAULT_METRIC,
) -> dict[str, float]:
    """Pearson r (95 % interval by Fisher's z), CCC, MAE (skewness-corrected t over persons) and
    ``metric`` across sessions, and the numbers of sessions and persons.

    >>> s = score(np.array([1.0, 2, 3, 4]), np.array([1.0, 2, 3, 4]), [1, 1, 2, 2])
    >>> round(s["r"], 3), round(s["ccc"], 3), s["mae"], s["n_sessions"], s["n_persons"]
    (1.0, 1.0, 0.0, 4, 2)
    """
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    n = len(y)
    r = float(np.corrcoef(y, pred)[0, 1]) if n > 2 and np.std(pred) > 0 and np.std(y) > 0 else 0.0
    r_low = r_high = math.nan if n <= 3 else r
    if n > 3 and abs(r) < 1:
        z, half = math.atanh(r), sstats.norm.ppf(0.5 + LEVEL / 2) / math.sqrt(n - 3)
        r_low, r_high = math.tanh(z - half), math.tanh(z + half)
    err = pd.Series(np.abs(y - pred)).groupby(np.asarray(persons)).mean().to_numpy()
    mae_low, mae_high = (
        mean_interval(err, LEVEL, (0.0, np.inf)) if len(err) >= 3 else (math.nan,) * 2
    )
    default = get_metric(DEFAULT_METRIC)
    out = {"r": r, "r_ci_low": r_low, "r_ci_high": r_high, default.name: default(y, pred)}
    out |= {"mae": float(np.mean(np.abs(y - pred))), "mae_ci_low": mae_low, "mae_ci_high": mae_high}
    out[metric] = out[metric] if metric in out else get_metric(metric)(y, pred)
    return out | {"n_sessions": n, "n_persons": len(err)}


def score_names(metric: str = DEFAULT_METRIC) -> list[str]:
    """The keys of :func:`score`, in its order (the columns of ``summary_sessions.csv``)."""
    fixed = ["r", "r_ci_low", "r_ci_high", DEFAULT_METRIC, "mae", "mae_ci_low", "mae_ci_high"]
    return [*fixed, *([] if metric in fixed else [metric]), "n_sessions", "n_persons"]


# ------------------------------------------------------------------------------ study
@dataclass
class SessionLevelResult:
    """A session-level study: one row per configuration (best first), the out-of-fold predictions
    and runs by label, the files, and the nested selection's scores and choices (if ``nested``)."""

    table: pd.DataFrame
    predictions: dict[str, pd.DataFrame]
    parent_run_id: str
    child_run_ids: dict[str, str]
    files: list[Path]
    n_sessions: int
    n_persons: int
    nested: dict[str, float] = field(default_factory=dict)
    nested_choices: list[str] = field(default_factory=list)


@dataclass
class _Data:
    """The rated sessions, their summaries ``x``, ratings ``y``, persons and the outer folds."""

    rated: pd.DataFrame
    channels: list[str]
    x: np.ndarray
    y: np.ndarray
    persons: np.ndarray
    folds: list[np.ndarray]

    def frame(self, prediction: np.ndarray) -> pd.DataFrame:
        """``oof.csv``: each session's rating and ``prediction``."""
        sessions = self.rated[["session", "listener", "story"]]
        return sessions.assign(rating=self.y, prediction=prediction)


def _data(cfg: SessionLevelConfig, st: Store, progress: bool) -> _Data:
    """The study's sessions and features; :class:`ConfigError` with fewer than 2 persons."""
    rated = rated_sessions(st, cfg.target)
    persons = rated["listener"].to_numpy()
    if len(set(persons)) < 2:
        raise ConfigError(
            f"the {len(rated)} session(s) rated {cfg.target!r} in {st.root} are of one person; "
            "cross-validation by person needs at least 2"
        )
    x = session_table(st, list(rated["session"]), cfg.channels, cfg.stats, progress)
    channels = sorted({"/".join(c.split("/")[:2]) for c in x.columns})  # role/channel/column:stat
    folds = person_folds(persons, cfg.protocol, cfg.folds)
    y = rated["value"].to_numpy(dtype=float)
    return _Data(rated, channels, x.to_numpy(), y, persons, folds)


class _Runs:
    """The study's MLflow runs, tagged as the sweep's: the parent ``sessions-<target>``, a child per
    configuration (a FINISHED run of its hash on this store by this code is reused)."""

    def __init__(self, cfg: SessionLevelConfig, st: Store, tracking_uri: str | None, resume: bool):
        self.cfg = cfg
        self.tracker = Tracker(tracking_uri or cfg.tracking_uri, cfg.experiment)
        self.tracker.reap_stale()
        fingerprint, _ = store_fingerprint(st)
        code = code_version()
        self.tags = {"study": "session_level", "store_fingerprint": fingerprint, **code.tags()}
        self.finished = (
            self.tracker.finished_by_hash(fingerprint, code.fingerprint) if resume else {}
        )
        self.parent = ""

    def start(self, data: _Data, n_configs: int) -> str:
        """Start the parent run with the study's params."""
        cfg = self.cfg
        self.parent = self.tracker.start_run(f"sessions-{cfg.target}", tags=self.tags)
        params = {"target": cfg.target, "protocol": cfg.protocol, "folds": len(data.folds)}
        params |= {"stats": ",".join(cfg.stats), "channels": ",".join(data.channels)}
        params |= {"n_features": data.x.shape[1], "n_configs": n_configs, "metric": cfg.metric}
        metrics = {"n_sessions": len(data.y), "n_persons": len(set(data.persons))}
        self.tracker.log(self.parent, params=params, metrics=metrics)
        return self.parent

    def hash(self, data: _Data, c: Candidate) -> str:
        """The configuration's resume key: its data, folds, model and resolved hyperparameters."""
        key = {k: getattr(self.cfg, k) for k in ("target", "stats", "protocol", "folds", "seed")}
        key |= {"study": "session_level", "channels": data.channels, "model": c.name}
        return config_hash(key | {"params": resolve_model_params(c.name, dict(c.params))})

    def evaluate(self, data: _Data, c: Candidate) -> tuple[dict[str, float], pd.DataFrame, str]:
        """``c``'s scores, out-of-fold predictions and run (logged now, or reused)."""
        h, cfg = self.hash(data, c), self.cfg
        if (old := self.finished.get(h)) is not None:
            return self.reused(old, data)
        t0 = time.perf_counter()
        pred = out_of_fold(c, data.x, data.y, data.folds, cfg.seed)
        scores = score(data.y, pred, data.persons, cfg.metric)
        tags = {**self.tags, CONFIG_HASH_TAG: h}
        child = self.tracker.start_run(c.label, parent_id=self.parent, tags=tags)
        params = {"model": c.name, **dict(c.params), "target": cfg.target}
        metrics = {**scores, "fit_seconds": time.perf_counter() - t0}
        self.tracker.log(child, params=params, metrics=metrics)
        oof = data.frame(pred)
        log_files(self.tracker, child, {"oof.csv": oof.to_csv(index=False)})
        self.tracker.finish(child)
        return scores, oof, child

    def reused(self, run: Any, data: _Data) -> tuple[dict[str, float], pd.DataFrame, str]:
        """An earlier run's scores (in :func:`score`'s order) and out-of-fold predictions."""
        run_id, logged = run.info.run_id, run.data.metrics
        with tempfile.TemporaryDirectory() as tmp:
            oof = pd.read_csv(self.tracker.client.download_artifacts(run_id, "oof.csv", tmp))
        scores = {k: logged.get(k, math.nan) for k in score_names(self.cfg.metric)}
        return scores | {k: int(scores[k]) for k in ("n_sessions", "n_persons")}, oof, run_id

    def nested(
        self, data: _Data, grid: Sequence[Candidate], progress: bool
    ) -> tuple[dict[str, float], list[str]]:
        """The nested selection's scores and choices (:func:`nested_out_of_fold`), logged to the parent."""
        pred, choices = nested_out_of_fold(grid, data, self.cfg, progress)
        nested = score(data.y, pred, data.persons, self.cfg.metric)
        self.tracker.log(self.parent, metrics={f"nested_{k}": v for k, v in nested.items()})
        oof = data.frame(pred).to_csv(index=False)
        log_files(self.tracker, self.parent, {"nested_oof.csv": oof})
        return nested, choices

    def finish(self, table: pd.DataFrame, md: str) -> None:
        """The parent's summary files, best configuration and metrics; the parent closed."""
        best, names = table.iloc[0], dict.fromkeys(("r", DEFAULT_METRIC, "mae", self.cfg.metric))
        files = {"summary.csv": table.to_csv(index=False), "summary.md": md}
        log_files(self.tracker, self.parent, files)
        self.tracker.log(
            self.parent,
            metrics={f"best_{k}": float(best[k]) for k in names},
            tags={"best_run_id": best["run_id"], "best_config": best["config"]},
        )
        self.tracker.finish(self.parent)


def run_sessions(
    cfg: SessionLevelConfig,
    store: str | Path | Store,
    out_dir: str | Path = "reports",
    tracking_uri: str | None = None,
    progress: bool = True,
    resume: bool = True,
) -> SessionLevelResult:
    """Cross-validate every configuration of ``cfg.models`` on the rating ``cfg.target``, logged
    to MLflow and to ``out_dir`` (``summary_sessions.{csv,md}``); finished runs reused if ``resume``.
    ConfigError: no session has the rating, a channel is missing, or one person only."""
    st = as_store(store)
    data = _data(cfg, st, progress)
    names = corpus_layout(st).role_names
    grid, runs = model_grid(cfg.models), _Runs(cfg, st, tracking_uri, resume)
    runs.start(data, len(grid))
    rows, predictions, children = [], {}, {}
    try:
        for c in tqdm(grid, desc=f"sessions {cfg.target}", unit="config", disable=not progress):
            scores, predictions[c.label], children[c.label] = runs.evaluate(data, c)
            rows.append({"config": c.label, "model": c.name, **scores, "run_id": children[c.label]})
        ascending = not get_metric(cfg.metric).higher_is_better
        table = pd.DataFrame(rows).sort_values(cfg.metric, ascending=ascending, kind="stable")
        table = table.reset_index(drop=True)
        nested, choices = runs.nested(data, grid, progress) if cfg.nested else ({}, [])
        files = [Path(out_dir) / "summary_sessions.csv", Path(out_dir) / "summary_sessions.md"]
        files[0].parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(files[0], index=False)
        files[1].write_text(sessions_markdown(cfg, table, data, nested, choices, names))
        runs.finish(table, files[1].read_text())
    except BaseException:
        runs.tracker.finish(runs.parent, "FAILED")
        raise
    n_persons = len(set(data.persons))
    return SessionLevelResult(
        table, predictions, runs.parent, children, files, len(data.y), n_persons, nested, choices
    )


def sessions_markdown(
    cfg: SessionLevelConfig,
    table: pd.DataFrame,
    data: _Data,
    nested: Mapping[str, float],
    choices: Sequence[str],
    names: Mapping[str, str] | None = None,
) -> str:
    """The study's report: its data (channels in the corpus's ``names``), one line per configuration."""
    shown = [corpus_key(c, names or {}) for c in data.channels]
    lines = [
        f"# Whole-session rating `{cfg.target}`",
        "",
        f"{len(data.y)} sessions of {len(set(data.persons))} persons; protocol `{cfg.protocol}` "
        f"({len(data.folds)} folds, a person's sessions all in one fold); summaries "
        f"{', '.join(cfg.stats)} of the valid rows of {', '.join(shown)}. Scores are over the out-of-fold "
        "predictions of every session, with 95 % intervals: r by Fisher's z over sessions "
        "(too narrow when a person's sessions are alike), MAE by a skewness-corrected t over persons. The best row "
        "is chosen on the folds it is scored on: an optimistic estimate, to read against the "
        "`dummy` baseline and the nested selection.",
        "",
    ]
    extra = score_names(cfg.metric)[7:-2]  # another metric's column
    default = get_metric(DEFAULT_METRIC)
    rows = (
        [r["config"], _interval(r, "r"), f"{r[default.name]:.3f}", _interval(r, "mae")]
        + [markdown.number(r[k]) for k in extra]
        for r in table.to_dict("records")
    )
    head = ["configuration", "Pearson r", default.title, "MAE"]
    lines += markdown.table([*head, *(get_metric(k).title for k in extra)], rows)
    lines += [f"\n`{k}`: one value over every session, no interval." for k in extra]
    if nested:
        counts = pd.Series(list(choices)).value_counts()
        lines += [
            "",
            f"**Nested selection** (each fold's configuration chosen by an inner cross-validation "
            f"over its training persons, then scored on the held-out ones): Pearson r "
            f"{_interval(nested, 'r')}, {default.title} {nested[default.name]:.3f}, "
            f"MAE {_interval(nested, 'mae')}; chosen: "
            + ", ".join(f"{label} ({n} of {len(choices)} folds)" for label, n in counts.items()),
        ]
    return "\n".join(lines) + "\n"


def _interval(row: Mapping[Any, Any], name: str) -> str:
    """The score ``name`` with its 95 % interval where it has one."""
    return markdown.interval(row[name], row[f"{name}_ci_low"], row[f"{name}_ci_high"])
