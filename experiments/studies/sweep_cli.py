"""What ``experiments sweep`` prints when it is done (:func:`print_sweep`); it imports only the
standard library until it runs (a quick ``--help``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..tracking.redact import mask_uri

if TYPE_CHECKING:
    from .parent_run import SweepResult


def print_sweep(res: SweepResult) -> int:
    """Print what a sweep did (counts, best five, choices, runs); 1 if any failed."""
    t = res.table
    done, reused = ((t.status == s).sum() if not t.empty else 0 for s in ("done", "reused"))
    print(
        f"\nsweep summary: {done} configurations run, {reused} reused from earlier runs, {res.n_failed} failed"
    )
    for target, names in res.without_labels.items():  # a blind test's: neither trained nor scored
        print(
            f"left out {len(names)} sessions without labels of {target}: {', '.join(names)} "
            "(predict only)"
        )
    _print_best(res)
    print(res.layout.in_words(_choices(res), res.keep), end="")
    if study := getattr(res, "study_name", ""):
        print(f"optuna study {study} in {mask_uri(res.storage)}: {len(res.trials)} trials")  # type: ignore[attr-defined]
    per_track = ", ".join(f"{k} {v}" for k, v in res.best_run_ids.items()) or "none"
    print(
        f"parent run {res.parent_run_id} (experiment {res.experiment_id}); best child "
        f"{res.best_run_id} (per track: {per_track})"
    )
    for label, err in res.failed:
        print(f"  FAILED {label}: {err}", file=sys.stderr)
    if constant := _constant_tracks(res):
        print(
            f"experiments sweep: no {' or '.join(constant)} configuration chosen: every one "
            "predicts a constant (or nothing) in every session of a split, so its score says "
            "nothing; check window.delay_s and the feature sets against the sessions",
            file=sys.stderr,
        )
    return 1 if res.n_failed or (constant and not res.best_run_ids) else 0


def _constant_tracks(res: SweepResult) -> list[str]:
    """The tracks without a choice because every candidate but the baselines (constant by
    design: a grid of them only is no fault) is marked constant_predictions."""
    from ..config.models import MODELS  # startup: see the imports above
    from ..config.tracks import candidates
    from ..tracking.summary import constant_marked

    t, marked = res.table, constant_marked(res.table)
    if not marked.any() or "track" not in t:
        return []
    baselines = [name for name, spec in MODELS.all().items() if spec.baseline]
    ran = (t.status != "failed") & ~t["model.name"].isin(baselines)
    parts = {k: marked[ran & t.track.isin(candidates(k))] for k in res.selection_metrics}
    return [k for k, m in parts.items() if k not in res.best_run_ids and len(m) and m.all()]


def _print_best(res: SweepResult) -> None:
    """Each track's best five on the selection split (test numbers are for the choices only)."""
    import pandas as pd  # startup: see the imports above

    from ..config.metrics import get_metric  # startup, as pandas
    from ..config.tracks import candidates
    from ..tracking.summary import constant_marked

    t, ascending = res.table, not get_metric(res.metric).higher_is_better
    for track, metric in res.selection_metrics.items():
        if t.empty or metric not in t or "track" not in t:
            continue
        ok = t[(t.status != "failed") & t.track.isin(candidates(track))]
        top = ok.sort_values(metric, ascending=ascending).head(5)
        if not top.empty:
            print(f"\n{track} track, best 5 on {metric} (the selection split):")
            cols = [c for c in ("label", "track", metric) if c in t]
            if (marked := constant_marked(top)).any():  # never chosen: said beside its number
                top, cols = (
                    top.assign(note=marked.map({True: "constant", False: ""})),
                    [*cols, "note"],
                )
            with pd.option_context("display.width", 200, "display.max_colwidth", 80):
                print(top[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))


def _choices(res: SweepResult) -> str:
    """Each track's choice as Markdown (per target, then combined, with several targets)."""
    # startup: as print_sweep's own
    from ..tracking.summary import (
        combined_markdown,
        combined_summary,
        summary_markdown,
        track_summary,
    )
    from .unseen import nested_unseen  # startup: see the imports above

    t, protocol = res.table, res.selection_metric.split(".", 1)[0]  # the selection split
    targets = list(res.best_run_ids_by_target)
    if len(targets) <= 1:
        summary = track_summary(t, protocol, res.unseen_selection, res.nested_unseen, res.metric)
        return "" if summary.empty else f"\n{summary_markdown(summary)}\n"
    summaries = {}
    for target in targets:  # each target's own nested choices
        part = t[t["target"] == target]
        nested = res.unseen_selection == "nested"
        chosen = nested_unseen(part, protocol, False, res.metric) if nested else None
        summaries[target] = track_summary(part, protocol, res.unseen_selection, chosen, res.metric)
    text = "".join(f"\ntarget {k}:\n\n{summary_markdown(v)}\n" for k, v in summaries.items())
    return text + combined_markdown(targets, combined_summary(summaries)) + "\n"
