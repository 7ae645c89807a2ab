"""What drives a run's prediction: ``experiments explain RUN_ID`` (:func:`explain_run`) and the
ablation's choices (:func:`explain_choices`); docs/results.md, "What drives a prediction"."""

from __future__ import annotations

import functools
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias

import pandas as pd

from featurestore.parallel.memory import release_free_memory
from featurestore.storage.store import Store

from ..config.grid import Trial, trial_from_params
from ..config.metrics import DEFAULT_METRIC, get_metric
from ..config.models import model_spec
from ..config.schema import ExperimentConfig
from ..data.dataset import load_sessions, with_labels
from ..errors import ExperimentsError
from ..evaluation.fit_cache import FitCache
from ..evaluation.importance import (
    ImportanceResult,
    permutation_importance,
    permutation_importances,
)
from ..evaluation.plots import plot_importance, plot_session_scores
from ..tracking.child_runs import matrix_file
from ..tracking.redact import mask_uri
from ..tracking.summary import log_files
from ..tracking.tracker import CONFIG_HASH_TAG, Tracker, resolve_tracking_uri, tracking_client
from ..windowing.windowed import WindowKey, window_sessions
from .inter_rater import StoreLike
from .parent_run import store_fingerprint
from .sweep import grid_trials

#: the logged and the refitted unpermuted metric may differ by rounding only (float32 features)
REPRODUCED_TOLERANCE = 1e-4
#: run id -> its per-session scores (None: no run, or none logged)
ScoresOf: TypeAlias = Callable[[str], pd.DataFrame | None]


class ExplainError(ExperimentsError, ValueError):
    """The run cannot be explained; the message says which run and what to do."""


@dataclass
class Explanation:
    """What :func:`explain_trial` computed and wrote; ``logged``: the run's logged metric (or NaN)."""

    run_id: str
    trial: Trial
    track: str
    result: ImportanceResult
    files: list[Path] = field(default_factory=list)
    logged: float = float("nan")

    @property
    def table(self) -> pd.DataFrame:
        return self.result.table

    def summary(self, rows: int = 10) -> str:
        """The refitted and logged metric, then the first ``rows`` groups of each level, then the files."""
        t, m = self.table, get_metric(self.trial.metric)
        head = (
            f"{self.trial.label()}: {t.split.iloc[0]} {m.title} ({self.track} averaging) "
            f"{t[m.name].iloc[0]:.3f} (logged {self.logged:.3f}), "
            f"{int(t.n_listeners.iloc[0])} listeners, {int(t.repeats.iloc[0])} repeats"
        )
        cols = ["level", "rank", "group", "importance", "ci_low", "ci_high", "n_features"]
        first = t.groupby("level", sort=False).head(rows)[cols]
        with pd.option_context("display.width", 200, "display.max_colwidth", 60):
            body = first.to_string(index=False, float_format=lambda v: f"{v:.3f}")
        files = ", ".join(str(f) for f in self.files)
        return f"{head}\n{body}\nwritten: {files}; logged to run {self.run_id}"


def _explainable(trial: Trial | None) -> Trial | None:
    """``trial`` unless it is None or a baseline (which reads no feature)."""
    return None if trial is None or model_spec(trial.model).baseline else trial


def file_stem(feature_set: str, track: str) -> str:
    """``<feature_set>_<track>`` of the report names, without spaces (``late fusion``)."""
    return f"{feature_set}_{track}".replace(" ", "_")


def logged_scores(
    tracker: Tracker, run_id: str, metric: str = DEFAULT_METRIC
) -> pd.DataFrame | None:
    """The run's per-session ``metric`` (its :func:`matrix_file` artifact), None if it logged none."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            return pd.read_csv(tracker.client.download_artifacts(run_id, matrix_file(metric), tmp))
        except Exception:  # noqa: BLE001 - a run logged without artifacts has no matrix
            return None


def session_map(
    scores: pd.DataFrame,
    out_dir: str | os.PathLike,
    feature_set: str,
    track: str,
    label: str,
    tracker: Tracker,
    run_id: str,
    metric: str = DEFAULT_METRIC,
) -> Path:
    """``out_dir/<metric>_per_session_<feature_set>_<track>.png`` (per listener x story), also logged."""
    m = get_metric(metric)
    path = Path(out_dir) / f"{m.column('per_session')}_{file_stem(feature_set, track)}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    title = f"{m.title} per listener x story ({feature_set}, {track} track): {label}"
    plot_session_scores(scores, path, title, metric)
    log_files(tracker, run_id, {path.name: path.read_bytes()}, "importance")
    return path


def explain_trial(
    trial: Trial,
    track: str,
    result: ImportanceResult,
    tracker: Tracker,
    run_id: str,
    out_dir: str | os.PathLike = "reports",
    scores: pd.DataFrame | None = None,
) -> Explanation:
    """Write the importance ``result`` of ``trial`` to ``out_dir`` and log it to ``run_id``, with the
    heat map of ``scores`` (default: logged, else the refit's); warns when the refit is not the run."""
    split, m = str(result.scores.split.iloc[0]), get_metric(trial.metric)
    key = m.key(split, track)
    logged = tracker.client.get_run(run_id).data.metrics.get(key, float("nan"))
    refit = float(result.table[m.name].iloc[0]) if len(result.table) else float("nan")
    if abs(logged - refit) > REPRODUCED_TOLERANCE:
        warnings.warn(
            f"run {run_id}: the refitted {split} {m.title} ({refit:.4f}) is not the logged one "
            f"({logged:.4f}); the store or the code changed since the run",
            stacklevel=2,
        )
    if scores is None:
        scores = logged_scores(tracker, run_id, trial.metric)
    if scores is None or scores.empty:
        scores = result.scores
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = file_stem(trial.feature_set, track)
    csv, png = out / f"importance_{stem}.csv", out / f"importance_{stem}.png"
    result.table.to_csv(csv, index=False)
    what = f"{trial.feature_set}, {track} track, {split}"
    title = f"Permutation importance ({what}): {trial.label()}"
    plot_importance(result.table, png, title=title, metric=trial.metric)
    log_files(tracker, run_id, {f.name: f.read_bytes() for f in (csv, png)}, "importance")
    heat = session_map(
        scores, out, trial.feature_set, track, trial.label(), tracker, run_id, trial.metric
    )
    tracker.log_table(run_id, result.table, f"importance/importance_{stem}.json")
    above = result.table[result.table.ci_low > 0]
    rows = zip(above.level, above.group, above.importance, strict=True)
    tracker.log(
        run_id, metrics={f"importance.{lv}.{group}.{track}": float(v) for lv, group, v in rows}
    )
    return Explanation(run_id, trial, track, result, [csv, png, heat], float(logged))


def explain_run(
    run_id: str,
    store: str | os.PathLike = "features",
    tracking_uri: str | None = None,
    out_dir: str | os.PathLike = "reports",
    levels: Sequence[str] = ("channel", "column"),
    repeats: int = 5,
    split: str = "test",
    track: str | None = None,
    seed: int = 0,
    new_run: bool = False,
) -> Explanation:
    """``experiments explain RUN_ID``: the permutation importance of a configuration's child run's
    refit (:func:`explain_trial`), logged to that run or, with ``new_run``, to a new run tagged
    ``explains_run``. Raises :class:`ExplainError` for no such run, a parent run, a config hash
    its params do not give, a baseline, or a store whose fingerprint is not the run's (without
    ``new_run``); ``DatasetError`` for missing channels."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = resolve_tracking_uri(tracking_uri)
    client = tracking_client(uri, write=False)
    run = logged_run(
        client,
        uri,
        run_id,
        ExplainError,
        "a child run's id from the MLflow UI or reports/ablation.csv",
    )
    trial = run_trial(run_id, run.data.params, run.data.tags.get(CONFIG_HASH_TAG, ""))
    if _explainable(trial) is None:
        raise ExplainError(
            f"run {run_id} is the {trial.model} baseline, which reads no feature: nothing to permute"
        )
    tracker = Tracker(uri, client.get_experiment(run.info.experiment_id).name)
    fingerprint = fitted_store_fingerprint(
        run,
        store,
        ExplainError,
        None
        if new_run
        else "explain it with the run's store, or pass --new-run to log the importance into a new run",
    )
    splits = {name: list(stories) for name, stories in trial.splits}
    channels = sweep_channels(trial)
    tables = with_labels(load_sessions(store, channels, trial.target, splits, require_labels=False))
    w = window_sessions(tables, trial.window_key())
    track = track or trial.track
    result = permutation_importance(trial, w, levels, repeats, split, track, seed)
    if not new_run:
        return explain_trial(trial, track, result, tracker, run_id, out_dir)
    tags = {"explains_run": run_id, "store_fingerprint": fingerprint, CONFIG_HASH_TAG: trial.hash()}
    logged_to = tracker.start_run(f"explain {run.info.run_name or run_id}", tags)
    try:
        explained = explain_trial(trial, track, result, tracker, logged_to, out_dir)
    except BaseException:
        tracker.finish(logged_to, "FAILED")
        raise
    tracker.finish(logged_to)
    return explained


def logged_run(client: Any, uri: str, run_id: str, error: type[Exception], where: str) -> Any:
    """``run_id``'s MLflow run read through ``client``; ``error`` naming the tracking store and
    ``where`` a user copies a run id from when there is no such run."""
    from mlflow.exceptions import MlflowException  # heavy: loaded when a run is read

    try:
        return client.get_run(run_id)
    except MlflowException as e:
        raise error(f"no run {run_id} in {mask_uri(uri)}; copy {where}") from e


def fitted_store_fingerprint(
    run: Any, store: Store | str | os.PathLike, error: type[Exception], refuse: str | None
) -> str:
    """``store``'s fingerprint, checked against the one ``run`` was fitted on (its
    ``store_fingerprint`` tag): another store raises ``error`` ending with ``refuse`` (what a user
    does instead) unless ``refuse`` is None (the caller allows it)."""
    fitted_on, fingerprint = run.data.tags.get("store_fingerprint"), store_fingerprint(store)[0]
    if fitted_on not in (None, fingerprint) and refuse is not None:
        root = store.root if isinstance(store, Store) else store
        raise error(
            f"run {run.info.run_id} was fitted on another store (fingerprint {fitted_on}) than "
            f"{root} ({fingerprint}: shards changed, added or gone): {refuse}"
        )
    return fingerprint


def run_trial(run_id: str, params: dict[str, str], logged_hash: str) -> Trial:
    """The configuration of ``run_id`` from its ``params``, checked against its ``config_hash`` tag."""
    try:
        trial = trial_from_params(params)
    except KeyError as e:
        raise ExplainError(f"run {run_id}: {e.args[0]}; give a configuration's child run") from e
    if trial.hash() != logged_hash:
        raise ExplainError(
            f"run {run_id}: its params give config hash {trial.hash()}, its tag says "
            f"{logged_hash or 'nothing'}; it was logged by other code: run the sweep again"
        )
    return trial


def sweep_channels(trial: Trial) -> list[str]:
    """``trial``'s channels sorted, as the sweep loads them: a fit depends on the column order, so
    a refit on this load is the run's fit, number for number (and late fusion's sorted union too)."""
    return sorted(trial.channels)


def trials_by_hash(cfg: ExperimentConfig) -> dict[str, Trial]:
    """config hash -> the configuration as fitted for predictions, for every configuration a sweep
    of ``cfg`` logs under every hash it may carry (plain, unseen ``chosen``, unseen ``nested``)."""
    by_hash: dict[str, Trial] = {}
    for t in grid_trials(cfg):
        plain = replace(t, unseen_listener=False, unseen_nested=False)
        for variant in (
            plain,
            replace(plain, unseen_listener=True),
            replace(plain, unseen_listener=True, unseen_nested=True),
        ):
            by_hash.setdefault(variant.hash(), plain)
    return by_hash


def explain_choices(
    cfg: ExperimentConfig,
    table: pd.DataFrame,
    scores_of: ScoresOf,
    store: StoreLike,
    tracker: Tracker,
    out_dir: str | os.PathLike = "reports",
    cache: FitCache | None = None,
) -> list[Explanation | Path]:
    """The ablation's importance step: per feature set and track of ``table``, the chosen run's
    heat map and (``cfg.importance``, not a baseline) its importance: each :class:`Explanation`
    and each heat map drawn alone. ``cache``: fits made before (late fusion's members)."""
    by_hash = trials_by_hash(cfg)
    hash_of = functools.cache(
        lambda run: str(tracker.client.get_run(run).data.tags.get(CONFIG_HASH_TAG, ""))
    )
    out: list[Explanation | Path] = []
    for fs, rows in table.groupby("feature_set", sort=False):
        first = rows.iloc[0]
        runs = {t: str(first.get(f"run_id_{t}", "") or "") for t in ("personalized", "generalized")}
        trials = {
            t: _explainable(by_hash.get(hash_of(run))) if cfg.importance else None
            for t, run in runs.items()
            if run
        }
        choices = [(x, t) for t, x in trials.items() if x is not None]
        results = _importances(cfg, store, choices, cache)
        for track, trial in trials.items():
            scores = scores_of(runs[track])
            if trial is not None:
                result = results[trial, track]
                out.append(
                    explain_trial(trial, track, result, tracker, runs[track], out_dir, scores)
                )
            elif scores is not None and not scores.empty:  # a heat map alone
                label = str(first.get(f"label_{track}", ""))
                out.append(
                    session_map(
                        scores, out_dir, str(fs), track, label, tracker, runs[track], cfg.metric
                    )
                )
    return out


def _importances(
    cfg: ExperimentConfig,
    store: StoreLike,
    choices: Sequence[tuple[Trial, str]],
    cache: FitCache | None = None,
) -> dict[tuple[Trial, str], ImportanceResult]:
    """The importance of each (configuration, track) of one feature set: the sessions loaded once,
    one window at a time, the choices of one fit group together."""
    out: dict[tuple[Trial, str], ImportanceResult] = {}
    if not choices or cfg.importance is None:
        return out
    imp = cfg.importance
    by_window: dict[WindowKey, dict[Trial, list[tuple[Trial, str]]]] = {}
    for trial, track in dict.fromkeys(choices):
        groups = by_window.setdefault(trial.window_key(), {})
        groups.setdefault(trial.fit_key(), []).append((trial, track))
    first = choices[0][0]
    tables: list | None = with_labels(
        load_sessions(
            store,
            sweep_channels(first),
            target=first.target,
            splits=cfg.splits,
            gold_standard=cfg.gold_standard,
            require_labels=False,
        )
    )
    cache = cache or FitCache()
    for n, (key, groups) in enumerate(by_window.items()):
        w = window_sessions(tables or [], key)
        if n == len(by_window) - 1:
            tables = None  # the last window: the frames are no longer needed
        for group in groups.values():
            results = permutation_importances(
                group, w, imp.levels, imp.repeats, imp.split, cfg.seed, cache=cache
            )
            for choice, result in zip(group, results, strict=True):
                out[choice] = result
        cache.release(w.names)
        del w  # one window at a time, with its fits
        release_free_memory()  # the heap would keep the window's pages for the next one
    return out
