"""The ablation's ``late fusion`` row: each track's member choices blended, logged as a run.

For each track, the members (``fusion.members`` of the config, see
:mod:`experiments.config.fusion`) are the configurations the ablation chose for them on that
track (:func:`experiments.studies.ablation.ablation_table`). Their predictions are made again
from the store (the same fits their runs made, plus the leave-one-training-story-out fits that
give the out-of-fold predictions), blended (:func:`experiments.evaluation.fusion.late_fusion`)
and scored; the fusion is logged as a child run of the ablation's parent, with the same
metrics and artifacts as a configuration's (``ccc_matrix.csv``, ``predictions/<split>/``,
so ``experiments export`` and ``score`` work on it), plus ``fusion.yaml``: the members' runs
and labels and the blend's weights. When both tracks chose the same members, one fusion
serves both, as one configuration does.

The unseen-listener column stays empty for the fused row: a blend fitted without each listener
in turn is not made.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..config.fusion import FUSED_SET
from ..config.grid import Trial, format_value
from ..config.options import TRACKS
from ..config.schema import ExperimentConfig
from ..data.dataset import load_sessions
from ..data.lookahead import channel_lookaheads, with_channel_lookahead
from ..evaluation.fit_cache import FitCache
from ..evaluation.fusion import FusionResult, late_fusion
from ..executors.memory import release_free_memory
from ..tracking.child_runs import warnings_tags, write_prediction_csv
from ..tracking.provenance import code_version
from ..tracking.tracker import CONFIG_HASH_TAG, Tracker
from ..windowing.windowed import Windowed, window_sessions
from .parent_run import SweepResult
from .sweep import grid_trials


def _trials_by_hash(cfg: ExperimentConfig) -> dict[str, Trial]:
    """config hash -> the configuration (as fitted for predictions: no unseen-listener protocol),
    for every configuration of the sweep and its unseen-listener twins."""
    out: dict[str, Trial] = {}
    for t in grid_trials(cfg):
        plain = replace(t, unseen_listener=False, unseen_nested=False)
        for variant in (
            plain,
            replace(plain, unseen_listener=True),
            replace(plain, unseen_listener=True, unseen_nested=True),
        ):
            out.setdefault(variant.hash(), plain)
    return out


def _members(
    sweep: SweepResult, df: pd.DataFrame, members: list[str], track: str
) -> list[tuple[str, str]] | None:
    """(feature set, run id) of each member's choice on ``track``; None when one has none."""
    out = []
    for fs in members:
        runs = df.loc[df.feature_set == fs, f"run_id_{track}"]
        run = str(runs.iloc[0]) if len(runs) else ""
        if not run:
            return None
        out.append((fs, run))
    return out


def _log(
    tracker: Tracker,
    sweep: SweepResult,
    cfg: ExperimentConfig,
    result: FusionResult,
    member_runs: list[tuple[str, str]],
    tracks: list[str],
) -> str:
    """Log ``result`` as a child run of the ablation's parent; returns its run id."""
    names = [fs for fs, _ in member_runs]
    run_id = tracker.start_run(
        f"{FUSED_SET} ({' + '.join(names)}, {cfg.fusion.blend})",
        tags={
            "track": result.track,
            "causal": format_value(result.causal),
            "fusion": cfg.fusion.method,
            "fusion.chosen_for": ",".join(tracks),
            **code_version().tags(),
        },
        parent_id=sweep.parent_run_id,
    )
    params = {
        "features.set": FUSED_SET,
        "fusion.method": cfg.fusion.method,
        "fusion.members": ",".join(names),
        "fusion.member_runs": ",".join(run for _, run in member_runs),
        "fusion.blend": cfg.fusion.blend,
        "track": result.track,
        "causal": format_value(result.causal),
        "target": cfg.target,
        "protocol": cfg.protocol,
        "seed": format_value(cfg.seed),
    }
    if cfg.fusion.blend == "ridge":
        params["fusion.alpha"] = format_value(cfg.fusion.alpha)
    metrics = dict(result.metrics)
    metrics.update(
        {
            f"fusion.weight.{fs}": float(w)
            for fs, w in zip(names, result.blend.weights_, strict=True)
        }
    )
    metrics["fusion.intercept"] = result.blend.intercept_
    metrics["train_oof.ccc_mean"] = result.train_ccc
    metrics["fit_seconds"] = result.seconds
    tracker.log(
        run_id,
        params=params,
        metrics=metrics,
        tags=warnings_tags(result.notes),
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        result.scores.sort_values(["split", "listener", "story"]).to_csv(
            folder / "ccc_matrix.csv", index=False
        )
        split_of = dict(zip(result.scores.session, result.scores.split, strict=True))
        for sid, pred in result.predictions.items():
            d = folder / "predictions" / split_of[sid]
            d.mkdir(parents=True, exist_ok=True)
            write_prediction_csv(d / f"{sid}.csv", pred)
        summary = {
            "fusion": cfg.fusion.to_dict(),
            "track": result.track,
            "members": [
                {"feature_set": fs, "run_id": run, "label": t.label(), "track": t.track}
                for (fs, run), t in zip(member_runs, result.members, strict=True)
            ],
            "weights": {fs: float(w) for fs, w in zip(names, result.blend.weights_, strict=True)},
            "intercept": result.blend.intercept_,
            "blend_rows": result.blend.n_rows_,
            "train_out_of_fold_ccc_mean": result.train_ccc,
            "code": code_version().tags(),
        }
        (folder / "fusion.yaml").write_text(yaml.safe_dump(summary, sort_keys=False))
        tracker.log_artifacts(run_id, tmp)
    tracker.finish(run_id, "FINISHED")
    return run_id


def fusion_rows(
    cfg: ExperimentConfig,
    sweep: SweepResult,
    df: pd.DataFrame,
    store,
    tracking_uri: str | None = None,
    cache: FitCache | None = None,
) -> tuple[pd.DataFrame, dict[str, FusionResult]]:
    """The ``late fusion`` rows of the ablation table (the columns of ``df``, one per split) and
    the fusions by run id; their per-session scores are added to ``sweep.scores`` so the paired
    comparisons find them. Empty when ``cfg`` has no fusion or a member has no choice.
    ``cache``: where the members' fits are kept (for the importance of the same choices, which
    the caller then releases); by default, one of this call.
    """
    if not cfg.fusion.enabled:
        return df.iloc[0:0], {}
    by_hash = _trials_by_hash(cfg)
    table = sweep.table.set_index("run_id") if not sweep.table.empty else sweep.table
    chosen = {t: _members(sweep, df, cfg.fusion.members, t) for t in TRACKS}
    if not all(chosen.values()):
        return df.iloc[0:0], {}
    trials: dict[str, Trial] = {}
    for runs in chosen.values():
        for _, run in runs or []:
            h = str(table.at[run, CONFIG_HASH_TAG])
            if h not in by_hash:
                raise ValueError(
                    f"run {run}: its configuration (config hash {h}) is not in the config's grid; "
                    "late fusion refits the members from the config that chose them"
                )
            trials[run] = by_hash[h]
    channels = sorted({c for t in trials.values() for c in t.channels})
    # the members' look-ahead on this store: the fusion is causal when every member is
    counted = with_channel_lookahead(list(trials.values()), channel_lookaheads(store, channels))
    trials = dict(zip(trials, counted, strict=True))
    tables = load_sessions(
        store, channels, target=cfg.target, splits=cfg.splits, gold_standard=cfg.gold_standard
    )
    windows: dict = {}

    def windowed(t: Trial) -> Windowed:
        if t.window_key() not in windows:
            windows[t.window_key()] = window_sessions(tables, t.window_key())
        return windows[t.window_key()]

    tracker = Tracker(tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    done: dict[tuple[str, ...], str] = {}
    results: dict[str, FusionResult] = {}
    run_of: dict[str, str] = {}
    # the tracks' members often share fit groups (one model, rescaled per track): fitted once
    own = cache is None
    cache = FitCache() if cache is None else cache
    for n, track in enumerate(TRACKS):
        member_runs = chosen[track] or []
        key = tuple(run for _, run in member_runs)
        # a window no later track uses is dropped before this track's are made: one track's
        # members' features at a time, not every member's (a feature set's features take GBs)
        later = {trials[run].window_key() for t in TRACKS[n:] for _, run in chosen[t] or []}
        for stale in [k for k in windows if k not in later]:
            del windows[stale]
        release_free_memory()
        if key not in done:
            result = late_fusion(
                [(trials[run], windowed(trials[run])) for run in key],
                blend=cfg.fusion.blend,
                alpha=cfg.fusion.alpha,
                seed=cfg.seed,
                cache=cache,
            )
            same = [t for t in TRACKS if tuple(r for _, r in chosen[t] or []) == key]
            done[key] = _log(tracker, sweep, cfg, result, member_runs, same)
            results[done[key]] = result
            sweep.scores[done[key]] = result.scores
        run_of[track] = done[key]
    if own:
        cache.clear()
    windows.clear()
    release_free_memory()  # the members' features: the heap would keep their pages
    rows = []
    for split in ("val", "test"):
        row: dict = {c: np.nan for c in df.columns}
        row.update(feature_set=FUSED_SET, split=split)
        row["split_role"] = "selection" if split == "val" else "held-out"
        for track in TRACKS:
            run = run_of[track]
            r = results[run]
            m = r.metrics
            row[f"ccc_{track}"] = m.get(f"{split}.ccc_{track}", np.nan)
            row[f"run_id_{track}"] = run
            for end in ("ci_low", "ci_high"):
                row[f"ccc_{track}_{end}"] = (
                    np.nan if split == "val" else m.get(f"{split}.ccc_{track}.{end}", np.nan)
                )
            row[f"chance_{track}_q95"] = m.get(f"{split}.ccc_{track}.chance_q95", np.nan)
            row[f"config_track_{track}"] = r.track
            row[f"causal_{track}"] = format_value(r.causal)
            weights = ", ".join(
                f"{fs} {w:.2f}"
                for (fs, _), w in zip(chosen[track] or [], r.blend.weights_, strict=True)
            )
            members = ", ".join(f"{fs} `{run_id}`" for fs, run_id in chosen[track] or [])
            row[f"label_{track}"] = (
                f"{cfg.fusion.blend} blend of {members}: weights {weights}, "
                f"intercept {r.blend.intercept_:.3f}"
            )
        row["n_listeners"] = results[run_of["personalized"]].metrics.get(
            f"{split}.n_listeners", np.nan
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=df.columns), results
