"""What drives a run's prediction: ``experiments explain RUN_ID``, and the ablation's chosen configurations.

For a configuration's child run, :func:`explain_run` rebuilds its :class:`~experiments.config.grid.Trial`
from the run's params (checked against its ``config_hash`` tag), loads the store's sessions,
fits the model on the training stories exactly as the sweep did (fits are deterministic: the
configuration's seed, the same rows; the fitted estimator is not stored with a run, and the
refit's unpermuted CCC is compared with the run's logged one), and computes the permutation
importance of :mod:`experiments.evaluation.importance`. :func:`explain_trial` writes, for a
feature set and a track:

* ``reports/importance_<feature_set>_<track>.csv`` (columns
  :data:`~experiments.evaluation.importance.COLUMNS`) and ``.png`` (the top groups per level);
* ``reports/ccc_per_session_<feature_set>_<track>.png``: CCC per listener x story of the run;

and logs them to the run under ``importance/`` (the table also as an MLflow table,
``importance/importance_<feature_set>_<track>.json``) with the metrics
``importance.<level>.<group>`` (mean drop in CCC) of the groups whose interval lies above zero.
``experiments ablate`` calls :func:`explain_trial` for each feature set's two chosen
configurations when the config has ``importance`` (:class:`~experiments.config.schema.ImportanceConfig`).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ..config.grid import Trial, expand, trial_from_params
from ..config.models import model_spec
from ..config.schema import ExperimentConfig
from ..data.dataset import load_sessions
from ..evaluation import markdown
from ..evaluation.fit_cache import FitCache
from ..evaluation.importance import (
    ImportanceResult,
    permutation_importance,
    permutation_importances,
)
from ..evaluation.plots import plot_importance, plot_session_ccc
from ..executors.memory import release_free_memory
from ..tracking.tracker import CONFIG_HASH_TAG, Tracker, resolve_tracking_uri
from ..windowing.windowed import Windowed, WindowKey, window_sessions

#: the logged and the refitted unpermuted CCC may differ by rounding only (float32 features)
REPRODUCED_TOLERANCE = 1e-4


class ExplainError(ValueError):
    """The run cannot be explained (no such run, not a configuration's run, a baseline); the
    message says which run and what to do."""


@dataclass
class Explanation:
    """What :func:`explain_trial` computed and wrote: the importance, the files, the run's
    logged CCC beside the refitted one (``ccc_logged``; NaN when the run has no such metric)."""

    run_id: str
    trial: Trial
    track: str
    result: ImportanceResult
    files: list[Path] = field(default_factory=list)
    ccc_logged: float = float("nan")

    @property
    def table(self) -> pd.DataFrame:
        return self.result.table

    def summary(self, rows: int = 10) -> str:
        """The refitted and logged CCC, then the first ``rows`` groups of each level, then the files."""
        t = self.table
        head = (
            f"{self.trial.label()}: {t.split.iloc[0]} CCC ({self.track} averaging) "
            f"{t.ccc.iloc[0]:.3f} (logged {self.ccc_logged:.3f}), "
            f"{int(t.n_listeners.iloc[0])} listeners, {int(t.repeats.iloc[0])} repeats"
        )
        cols = ["level", "rank", "group", "importance", "ci_low", "ci_high", "n_features"]
        with pd.option_context("display.width", 200, "display.max_colwidth", 60):
            body = (
                t.groupby("level", sort=False)
                .head(rows)[cols]
                .to_string(index=False, float_format=lambda v: f"{v:.3f}")
            )
        files = ", ".join(str(f) for f in self.files)
        return f"{head}\n{body}\nwritten: {files}; logged to run {self.run_id}"


def _reads_no_feature(trial: Trial) -> bool:
    """The baselines: the training mean, the position prior."""
    return model_spec(trial.model).baseline


def file_stem(feature_set: str, track: str) -> str:
    """``<feature_set>_<track>``: the part of the report names after ``importance_`` (a space,
    as in ``late fusion``, becomes ``_``: file names without spaces)."""
    return f"{feature_set}_{track}".replace(" ", "_")


def _logged_scores(tracker: Tracker, run_id: str) -> pd.DataFrame | None:
    """The run's per-session CCC (its ``ccc_matrix.csv`` artifact), None if it logged none."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            return pd.read_csv(tracker.client.download_artifacts(run_id, "ccc_matrix.csv", tmp))
        except Exception:  # noqa: BLE001 - a run logged without artifacts has no matrix
            return None


def _log_files(tracker: Tracker, run_id: str, files: Sequence[Path]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            (Path(tmp) / f.name).write_bytes(f.read_bytes())
        tracker.log_artifacts(run_id, tmp, "importance")


def session_map(
    scores: pd.DataFrame,
    out_dir: str | os.PathLike,
    feature_set: str,
    track: str,
    label: str,
    tracker: Tracker,
    run_id: str,
) -> Path:
    """``out_dir/ccc_per_session_<feature_set>_<track>.png``: the run's CCC per listener x story
    (every split it scored), also logged to the run under ``importance/``."""
    path = Path(out_dir) / f"ccc_per_session_{file_stem(feature_set, track)}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    plot_session_ccc(
        scores, path, title=f"CCC per listener x story ({feature_set}, {track} track): {label}"
    )
    _log_files(tracker, run_id, [path])
    return path


def explain_trial(
    trial: Trial,
    w: Windowed | None,
    tracker: Tracker,
    run_id: str,
    out_dir: str | os.PathLike = "reports",
    levels: Sequence[str] = ("channel", "column"),
    repeats: int = 5,
    split: str = "test",
    track: str | None = None,
    seed: int = 0,
    scores: pd.DataFrame | None = None,
    result: ImportanceResult | None = None,
) -> Explanation:
    """Permutation importance of ``trial`` (its windowed features ``w``) on ``split`` with
    ``track``'s averaging (default the configuration's own track), written to ``out_dir`` and
    logged to the run ``run_id`` (see the module docstring). ``scores``: the run's per-session
    CCC for the heat map (default: its ``ccc_matrix.csv``, else the refit's ``split``).
    ``result``: that importance when already computed (then ``w`` is not read)."""
    track = track or trial.track
    if result is None:
        if w is None:
            raise ValueError("explain_trial needs the windowed features w or the result")
        result = permutation_importance(
            trial, w, levels=levels, repeats=repeats, split=split, track=track, seed=seed
        )
    run = tracker.client.get_run(run_id)
    logged = run.data.metrics.get(f"{split}.ccc_{track}", float("nan"))
    refit = float(result.table.ccc.iloc[0]) if len(result.table) else float("nan")
    if abs(logged - refit) > REPRODUCED_TOLERANCE:
        warnings.warn(
            f"run {run_id}: the refitted {split} CCC ({refit:.4f}) is not the logged one "
            f"({logged:.4f}); the store or the code changed since the run",
            stacklevel=2,
        )
    if scores is None:
        scores = _logged_scores(tracker, run_id)
    if scores is None or scores.empty:
        scores = result.scores
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = file_stem(trial.feature_set, track)
    csv, png = out / f"importance_{stem}.csv", out / f"importance_{stem}.png"
    result.table.to_csv(csv, index=False)
    what = f"{trial.feature_set}, {track} track, {split}"
    plot_importance(result.table, png, title=f"Permutation importance ({what}): {trial.label()}")
    _log_files(tracker, run_id, [csv, png])
    heat = session_map(scores, out, trial.feature_set, track, trial.label(), tracker, run_id)
    tracker.log_table(run_id, result.table, f"importance/importance_{stem}.json")
    above = result.table[result.table.ci_low > 0]
    tracker.log(
        run_id,
        metrics={
            f"importance.{level}.{group}.{track}": float(v)
            for level, group, v in zip(above.level, above.group, above.importance, strict=True)
        },
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
) -> Explanation:
    """``experiments explain RUN_ID``: the importance of a configuration's child run (see the
    module docstring and :func:`explain_trial`).

    Raises:
        ExplainError: no run ``run_id``, a run that is no configuration's (a parent run), a
            run whose params do not give its config hash, or the ``dummy`` baseline.
        DatasetError: the store lacks the configuration's channels or label target.
    """
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow import MlflowClient  # heavy: loaded when a run is read
    from mlflow.exceptions import MlflowException

    uri = resolve_tracking_uri(tracking_uri)
    client = MlflowClient(tracking_uri=uri)
    try:
        run = client.get_run(run_id)
    except MlflowException as e:
        raise ExplainError(
            f"no run {run_id} in {uri}; copy a child run's id from the MLflow UI or reports/ablation.csv"
        ) from e
    try:
        trial = trial_from_params(run.data.params)
    except KeyError as e:
        raise ExplainError(f"run {run_id}: {e.args[0]}; give a configuration's child run") from e
    logged_hash = run.data.tags.get(CONFIG_HASH_TAG, "")
    if trial.hash() != logged_hash:
        raise ExplainError(
            f"run {run_id}: its params give config hash {trial.hash()}, its tag says "
            f"{logged_hash or 'nothing'}; it was logged by other code: run the sweep again"
        )
    if _reads_no_feature(trial):
        raise ExplainError(
            f"run {run_id} is the {trial.model} baseline, which reads no feature: nothing to permute"
        )
    tracker = Tracker(uri, client.get_experiment(run.info.experiment_id).name)
    tables = load_sessions(
        store, sweep_channels(trial), target=trial.target, splits=dict_splits(trial)
    )
    w = window_sessions(tables, trial.window_key())
    return explain_trial(trial, w, tracker, run_id, out_dir, levels, repeats, split, track, seed)


def sweep_channels(trial: Trial) -> list[str]:
    """``trial``'s channels in the order the sweep loads them (sorted, as
    :class:`~experiments.tracking.context.SweepContext` lists every channel): the windowed
    features' columns follow the load order, and a model's fit depends on the column order, so
    a refit on this load is the run's fit, number for number (late fusion's load, the sorted
    union of its members' channels, lays them out the same way, so their fits are shared).
    """
    return sorted(trial.channels)


def dict_splits(trial: Trial) -> dict[str, list[int]]:
    """``trial``'s splits as the config writes them (split -> stories)."""
    return {name: list(stories) for name, stories in trial.splits}


def trials_by_hash(cfg: ExperimentConfig) -> dict[str, Trial]:
    """Each configuration of ``cfg``'s grid under every hash a sweep may have logged it with:
    as expanded, with ``unseen_listener`` (selection ``chosen``) and with ``unseen_nested`` too
    (selection ``nested``, every generalized configuration), so that a chosen run's
    configuration is found whichever selection the ablation ran."""
    by_hash: dict[str, Trial] = {}
    for t in expand(cfg):
        for variant in (
            t,
            replace(t, unseen_listener=True),
            replace(t, unseen_listener=True, unseen_nested=True),
        ):
            by_hash.setdefault(variant.hash(), t)
    return by_hash


def explain_choices(
    cfg: ExperimentConfig,
    table: pd.DataFrame,
    scores_of: Callable[[str], pd.DataFrame | None],
    store: str | os.PathLike,
    tracker: Tracker,
    out_dir: str | os.PathLike = "reports",
    cache: FitCache | None = None,
) -> list[Explanation | Path]:
    """The ablation's per-configuration pictures: for each feature set and track of ``table``
    (the ablation table, with ``run_id_<track>`` and ``label_<track>``), the CCC heat map of the
    chosen run (``scores_of(run_id)``: its per-session CCC), and, when ``cfg.importance`` is
    set, its permutation importance (:func:`explain_trial`; a baseline has none). Returns the
    :class:`Explanation` of each importance and the path of each heat map drawn alone.

    A feature set's sessions are loaded once; when its two choices share a fit group (e.g. one
    model with ``rescale`` ``train`` and ``listener``), their importance is computed together
    (:func:`~experiments.evaluation.importance.permutation_importances`): one set of fits and
    of permuted predictions, the same numbers as apart. ``cache``: fits made before (the late
    fusion's members, :func:`experiments.studies.fusion.fusion_rows`), each window's released
    once its importance is computed."""
    by_hash = trials_by_hash(cfg)
    hashes = {}
    out: list[Explanation | Path] = []
    for fs, rows in table.groupby("feature_set", sort=False):
        first = rows.iloc[0]
        chosen: list[tuple[str, str, Trial | None, pd.DataFrame | None]] = []
        for track in ("personalized", "generalized"):
            run_id = str(first.get(f"run_id_{track}", "") or "")
            if not run_id:
                continue
            scores = scores_of(run_id)
            if run_id not in hashes:
                hashes[run_id] = tracker.client.get_run(run_id).data.tags.get(CONFIG_HASH_TAG, "")
            trial = by_hash.get(hashes[run_id])
            if cfg.importance is None or trial is None or _reads_no_feature(trial):
                trial = None  # a heat map alone
            chosen.append((track, run_id, trial, scores))
        results = _importances(cfg, store, [(t, track) for track, _, t, _ in chosen if t], cache)
        for track, run_id, trial, scores in chosen:
            if trial is None or cfg.importance is None:
                if scores is not None and not scores.empty:
                    label = str(first.get(f"label_{track}", ""))
                    out.append(session_map(scores, out_dir, str(fs), track, label, tracker, run_id))
                continue
            imp = cfg.importance
            out.append(
                explain_trial(
                    trial,
                    None,
                    tracker,
                    run_id,
                    out_dir,
                    imp.levels,
                    imp.repeats,
                    imp.split,
                    track,
                    cfg.seed,
                    scores,
                    result=results[trial, track],
                )
            )
    return out


def _importances(
    cfg: ExperimentConfig,
    store: str | os.PathLike,
    choices: Sequence[tuple[Trial, str]],
    cache: FitCache | None = None,
) -> dict[tuple[Trial, str], ImportanceResult]:
    """The importance of each (configuration, track) of one feature set's ``choices``: the
    sessions loaded once, each window made once (one at a time), the choices of one fit group
    computed together."""
    out: dict[tuple[Trial, str], ImportanceResult] = {}
    if not choices or cfg.importance is None:
        return out
    imp = cfg.importance
    by_window: dict[WindowKey, dict[Trial, list[tuple[Trial, str]]]] = {}
    for trial, track in dict.fromkeys(choices):
        groups = by_window.setdefault(trial.window_key(), {})
        groups.setdefault(trial.fit_key(), []).append((trial, track))
    first = choices[0][0]
    tables: list | None = load_sessions(
        store,
        sweep_channels(first),
        target=first.target,
        splits=cfg.splits,
        gold_standard=cfg.gold_standard,
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


def importance_markdown(explained: Sequence[Explanation], top: int = 3) -> str:
    """The ablation report's section on the chosen configurations' importance: per choice, the
    ``top`` groups of each level with their drop in CCC and 95 % interval ("" without any)."""
    if not explained:
        return ""
    lines = [
        "",
        "## What the chosen configurations use (permutation importance)",
        "",
        "Drop in test CCC (the track's averaging) when a group's features are moved in time (each",
        "session's block circularly shifted by at least 10 s), mean over repeats, [95 % interval over",
        "listeners]; the fitted model is the chosen one's. An interval per group, not adjusted for the",
        "number of groups; correlated groups share their credit. Tables: `importance_<set>_<track>.csv`.",
        "",
    ]
    rows = []
    for e in explained:
        t = e.table
        for level in dict.fromkeys(t.level):
            best = t[t.level == level].head(top)
            cells = ", ".join(
                f"{r.group} {r.importance:.3f} [{r.ci_low:.2f}, {r.ci_high:.2f}]"
                for r in best.itertuples()
            )
            rows.append([e.trial.feature_set, e.track, level, cells])
    lines += markdown.table(
        ["features", "track", "level", f"top {top}: drop [95 % interval]"], rows
    )
    return "\n".join(lines) + "\n"
