"""The ablation's ``late fusion`` row (:func:`fusion_rows`): each track's member choices refitted,
blended, scored and logged as a child run (docs/results.md, "Late fusion beside early fusion")."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from featurestore.parallel.memory import release_free_memory

from ..config.fusion import FUSED_SET
from ..config.grid import Trial, format_value
from ..config.metrics import get_metric
from ..config.options import TRACKS
from ..config.schema import ExperimentConfig
from ..data.dataset import load_sessions, with_labels
from ..data.lookahead import channel_lookaheads, with_channel_lookahead
from ..evaluation.fit_cache import FitCache
from ..evaluation.fusion import FusionResult, late_fusion
from ..tracking.child_runs import matrix_file, warnings_tags, write_prediction_csv
from ..tracking.provenance import code_version
from ..tracking.tracker import CONFIG_HASH_TAG, Tracker
from ..windowing.windowed import Windowed, WindowKey, window_sessions
from .explain import trials_by_hash
from .inter_rater import StoreLike
from .parent_run import SweepResult

#: (feature set, run id) of each member of one track's fusion
Members = list[tuple[str, str]]


def _members(df: pd.DataFrame, members: list[str], track: str) -> Members | None:
    """(feature set, run id) of each member's choice on ``track``; None when one has none."""
    runs = [(fs, df.loc[df.feature_set == fs, f"run_id_{track}"]) for fs in members]
    out = [(fs, str(r.iloc[0]) if len(r) else "") for fs, r in runs]
    return out if all(run for _, run in out) else None


def fusion_rows(
    cfg: ExperimentConfig,
    sweep: SweepResult,
    df: pd.DataFrame,
    store: StoreLike,
    tracking_uri: str | None = None,
    cache: FitCache | None = None,
) -> tuple[pd.DataFrame, dict[str, FusionResult]]:
    """The ``late fusion`` rows of the ablation table (one per split) and the fusions by run id,
    their scores added to ``sweep.scores``; empty without fusion or a member's choice. ``cache``:
    where the members' fits are kept (the caller releases it; default: one of this call)."""
    if not cfg.fusion.enabled:
        return df.iloc[0:0], {}
    chosen = {t: _members(df, cfg.fusion.members, t) for t in TRACKS}
    if not all(chosen.values()):
        return df.iloc[0:0], {}
    members = {t: runs or [] for t, runs in chosen.items()}
    trials = _member_trials(cfg, sweep, store, [r for runs in members.values() for _, r in runs])
    uri = tracking_uri or cfg.tracking.uri
    tracker = Tracker(uri, cfg.tracking.experiment, cfg.tracking.artifacts)
    results, run_of = _fuse(cfg, sweep, store, members, trials, tracker, cache)
    rows = [_row(df.columns, split, cfg, members, results, run_of) for split in ("val", "test")]
    return pd.DataFrame(rows, columns=df.columns), results


def _member_trials(
    cfg: ExperimentConfig, sweep: SweepResult, store: StoreLike, runs: Sequence[str]
) -> dict[str, Trial]:
    """run id -> the member's configuration (by its config hash), with its channels' look-ahead."""
    by_hash = trials_by_hash(cfg)
    table = sweep.table.set_index("run_id") if not sweep.table.empty else sweep.table
    trials: dict[str, Trial] = {}
    for run in runs:
        h = str(table.at[run, CONFIG_HASH_TAG])
        if h not in by_hash:
            raise ValueError(
                f"run {run}: its configuration (config hash {h}) is not in the config's grid; "
                "late fusion refits the members from the config that chose them"
            )
        trials[run] = by_hash[h]
    channels = sorted({c for t in trials.values() for c in t.channels})
    counted = with_channel_lookahead(list(trials.values()), channel_lookaheads(store, channels))
    return dict(zip(trials, counted, strict=True))


def _fuse(
    cfg: ExperimentConfig,
    sweep: SweepResult,
    store: StoreLike,
    members: dict[str, Members],
    trials: dict[str, Trial],
    tracker: Tracker,
    cache: FitCache | None,
) -> tuple[dict[str, FusionResult], dict[str, str]]:
    """Each track's fusion fitted and logged (once for the same members): by run id, and each track's run."""
    channels = sorted({c for t in trials.values() for c in t.channels})
    tables = with_labels(
        load_sessions(
            store,
            channels,
            target=cfg.target,
            splits=cfg.splits,
            gold_standard=cfg.gold_standard,
            require_labels=False,
        )
    )
    windows: dict[WindowKey, Windowed] = {}
    done: dict[tuple[str, ...], str] = {}
    results: dict[str, FusionResult] = {}
    run_of: dict[str, str] = {}
    # the tracks' members often share fit groups (one model, rescaled per track): fitted once
    fits = FitCache() if cache is None else cache
    for n, track in enumerate(TRACKS):
        key = tuple(run for _, run in members[track])
        # a window no later track uses is dropped before this track's are made: one track's
        # members' features at a time, not every member's (a feature set's features take GBs)
        later = {trials[run].window_key() for t in TRACKS[n:] for _, run in members[t]}
        for stale in [k for k in windows if k not in later]:
            del windows[stale]
        release_free_memory()
        if key not in done:
            for run in key:
                if (wk := trials[run].window_key()) not in windows:
                    windows[wk] = window_sessions(tables, wk)
            result = late_fusion(
                [(trials[run], windows[trials[run].window_key()]) for run in key],
                blend=cfg.fusion.blend,
                alpha=cfg.fusion.alpha,
                seed=cfg.seed,
                cache=fits,
            )
            same = [t for t in TRACKS if tuple(r for _, r in members[t]) == key]
            done[key] = _log(tracker, sweep.parent_run_id, cfg, result, members[track], same)
            results[done[key]] = result
            sweep.scores[done[key]] = result.scores
        run_of[track] = done[key]
    if cache is None:
        fits.clear()
    windows.clear()
    release_free_memory()  # the members' features: the heap would keep their pages
    return results, run_of


def _row(
    columns: pd.Index,
    split: str,
    cfg: ExperimentConfig,
    members: dict[str, Members],
    results: dict[str, FusionResult],
    run_of: dict[str, str],
) -> dict[str, object]:
    """The fused row of the ablation table on ``split``, labelled by its members and weights."""
    row: dict[str, object] = {c: np.nan for c in columns}
    row.update(feature_set=FUSED_SET, split=split)
    row["split_role"] = "selection" if split == "val" else "held-out"
    m = get_metric(cfg.metric)
    for track in TRACKS:
        r = results[run_of[track]]
        name = m.key(split, track)
        row[m.column(track)] = r.metrics.get(name, np.nan)
        row[f"run_id_{track}"] = run_of[track]
        for end in ("ci_low", "ci_high"):
            row[m.column(f"{track}_{end}")] = (
                np.nan if split == "val" else r.metrics.get(f"{name}.{end}", np.nan)
            )
        row[f"chance_{track}_q95"] = r.metrics.get(f"{name}.chance_q95", np.nan)
        row[f"config_track_{track}"] = r.track
        row[f"causal_{track}"] = format_value(r.causal)
        weights = zip(members[track], r.blend.weights_, strict=True)
        text = ", ".join(f"{fs} {w:.2f}" for (fs, _), w in weights)
        runs = ", ".join(f"{fs} `{run_id}`" for fs, run_id in members[track])
        row[f"label_{track}"] = (
            f"{cfg.fusion.blend} blend of {runs}: weights {text}, intercept {r.blend.intercept_:.3f}"
        )
    personalized = results[run_of["personalized"]]
    row["n_listeners"] = personalized.metrics.get(f"{split}.n_listeners", np.nan)
    return row


def _log(
    tracker: Tracker,
    parent_id: str,
    cfg: ExperimentConfig,
    result: FusionResult,
    member_runs: Members,
    tracks: list[str],
) -> str:
    """Log ``result`` as a child run of ``parent_id``; returns its run id."""
    names = [fs for fs, _ in member_runs]
    code = code_version().tags()
    causal = format_value(result.causal)
    run_id = tracker.start_run(
        f"{FUSED_SET} ({' + '.join(names)}, {cfg.fusion.blend})",
        tags={"track": result.track, "causal": causal, "fusion": cfg.fusion.method}
        | {"fusion.chosen_for": ",".join(tracks), **code},
        parent_id=parent_id,
    )
    params = {
        "features.set": FUSED_SET,
        "fusion.method": cfg.fusion.method,
        "fusion.members": ",".join(names),
        "fusion.member_runs": ",".join(run for _, run in member_runs),
        "fusion.blend": cfg.fusion.blend,
        "track": result.track,
        "causal": causal,
        "target": cfg.target,
        "protocol": cfg.protocol,
        "seed": format_value(cfg.seed),
    }
    if cfg.fusion.blend == "ridge":
        params["fusion.alpha"] = format_value(cfg.fusion.alpha)
    weights = {fs: float(w) for fs, w in zip(names, result.blend.weights_, strict=True)}
    metrics = dict(result.metrics) | {f"fusion.weight.{fs}": w for fs, w in weights.items()}
    m = get_metric(cfg.metric)
    metrics |= {
        "fusion.intercept": result.blend.intercept_,
        f"train_oof.{m.column('mean')}": result.train_score,
    }
    metrics["fit_seconds"] = result.seconds
    tracker.log(run_id, params=params, metrics=metrics, tags=warnings_tags(result.notes))
    summary = {
        "fusion": cfg.fusion.to_dict(),
        "track": result.track,
        "members": [
            {"feature_set": fs, "run_id": run, "label": t.label(), "track": t.track}
            for (fs, run), t in zip(member_runs, result.members, strict=True)
        ],
        "weights": weights,
        "intercept": result.blend.intercept_,
        "blend_rows": result.blend.n_rows_,
        f"train_out_of_fold_{m.column('mean')}": result.train_score,
        "code": code,
    }
    with tempfile.TemporaryDirectory() as tmp:
        # a configuration's artifacts (`experiments export` and `score` work on the fusion)
        folder = Path(tmp)
        scores = result.scores.sort_values(["split", "listener", "story"])
        scores.to_csv(folder / matrix_file(m.name), index=False)
        split_of = dict(zip(result.scores.session, result.scores.split, strict=True))
        for sid, pred in result.predictions.items():
            d = folder / "predictions" / split_of[sid]
            d.mkdir(parents=True, exist_ok=True)
            write_prediction_csv(d / f"{sid}.csv", pred, cfg.target)
        (folder / "fusion.yaml").write_text(yaml.safe_dump(summary, sort_keys=False))
        tracker.log_artifacts(run_id, tmp)
    tracker.finish(run_id, "FINISHED")
    return run_id
