"""Self versus observer: how well do other people's ratings agree with what the listener reports?

Some OMG-Empathy releases carry, beside the listener's self-rating (``valence_self``),
observer ratings of the listener (``valence_observer_listener``) and of the speaker
(``valence_observer_speaker``) in the same per-frame format; ``featurestore extract`` and
``featurestore labels DIR --target NAME`` store each as a label target. This module compares
targets two by two:

* **agreement**: per session, Lin's CCC between the two ratings (the official metric,
  :func:`experiments.evaluation.metrics.ccc`), then both challenge protocols over the sessions
  (personalized: mean over listeners of each listener's mean over stories; generalized:
  mean over stories of each story's mean over listeners), over all sessions and per split.
  CCC is symmetric: the order within a pair does not change it.
* **cross-target**: one fixed configuration (the first non-baseline configuration of the
  config's grid, on one feature set) is trained on one target's labels (training stories)
  and its validation and test predictions are scored against both targets. A model trained
  on the self-rating that scores well against an observer rating predicts what others see;
  the gap between the two scores is how much of the prediction is private to the listener.

* **inter-rater** (targets stored with several raters, ``/raters/<target>/<rater>``): per
  session and pooled over sessions, ICC(2,1), ICC(3,1), ICC(2,k), ICC(3,k) (Shrout & Fleiss
  1979; formulas in :func:`experiments.data.gold_standard.icc`) and the mean pairwise CCC,
  as rated and after removing each rater's estimated reaction lag (within the config's
  ``gold_standard.max_lag_s``); the lags are reported. ICC(2,1) is single-rater absolute
  agreement, ICC(3,1) single-rater consistency (an offset between raters does not count);
  the ``k`` forms are the reliability of the raters' mean, the gold standard. Written to
  ``reports/inter_rater.csv`` and ``reports/inter_rater_lags.csv``; a store with raters but
  a single target gets only this part.

``experiments agreement`` writes ``reports/agreement.csv`` (columns ``session, listener,
story, target_a, target_b, ccc``), ``reports/agreement.md`` (both tables) and
``reports/agreement.png``, and logs them with the summary metrics to an MLflow run named
``agreement`` in the config's experiment.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from featurestore import Store

from ..config.grid import Trial, expand
from ..config.models import model_spec
from ..config.schema import ExperimentConfig
from ..data.dataset import load_sessions
from ..evaluation import markdown
from ..evaluation.evaluate import TrialResult, evaluate_trial, window_sessions
from ..evaluation.metrics import ccc, ccc_protocols
from ..evaluation.plots import plot_agreement
from ..tracking.child_runs import resolved_params
from ..tracking.provenance import code_version
from ..tracking.tracker import Tracker
from .inter_rater import (
    inter_rater_markdown,
    inter_rater_table,
    rater_metrics,
    write_raters,
)
from .parent_run import store_fingerprint

SELF_TARGET = "valence_self"
#: columns of ``agreement.csv`` (a contract, see DESIGN.md)
COLUMNS = ["session", "listener", "story", "target_a", "target_b", "ccc"]
SUMMARY_COLUMNS = [
    "target_a",
    "target_b",
    "split",
    "n_sessions",
    "ccc_personalized",
    "ccc_generalized",
    "ccc_min",
    "ccc_max",
]
CROSS_COLUMNS = [
    "trained_on",
    "scored_against",
    "feature_set",
    "split",
    "ccc_personalized",
    "ccc_generalized",
]


class AgreementError(ValueError):
    """Nothing to compare (a target is missing everywhere); the message says how to add it."""


def _store(store):
    return store if isinstance(store, Store) else Store(store)


def store_targets(store) -> dict[str, list[str]]:
    """Session -> its label targets, for every shard of the store."""
    st = _store(store)
    return {s: st.label_targets(s) for s in st.list_sessions()}


def target_pairs(store, targets: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """The pairs to compare: ``targets`` (two names) as given, else ``valence_self`` against
    every other target found in the store (observer ratings), in name order.

    Raises :class:`AgreementError` when a named target is in no shard, or when the store has
    no second target.
    """
    present = sorted({t for ts in store_targets(store).values() for t in ts})
    if targets is not None:
        targets = list(targets)
        if len(targets) != 2 or targets[0] == targets[1]:
            raise AgreementError(f"--targets needs two different label targets, got {targets}")
        for t in targets:
            if t not in present:
                raise AgreementError(
                    f"no session of the store has labels {t!r} (targets present: {', '.join(present) or 'none'}); "
                    f"add them with `featurestore labels DIR --target {t}`"
                )
        return [(targets[0], targets[1])]
    if SELF_TARGET not in present:
        raise AgreementError(
            f"the store has no {SELF_TARGET!r} labels (targets present: {', '.join(present) or 'none'}); "
            "name two targets with --targets A B"
        )
    others = [t for t in present if t != SELF_TARGET]
    if not others:
        raise AgreementError(
            f"the store has only {SELF_TARGET!r}: there is nothing to compare it with; add observer ratings with "
            "`featurestore labels DIR --target valence_observer_listener` (or put them in a folder whose name "
            "contains 'observer' next to the videos and re-run `featurestore extract`)"
        )
    return [(SELF_TARGET, t) for t in others]


def agreement_table(
    store, pairs: Sequence[tuple[str, str]], splits: dict[str, list[int]] | None = None
) -> pd.DataFrame:
    """One row per session and pair holding both targets: ``COLUMNS`` plus ``split``.

    ``splits`` (split -> stories) names each session's split from its story; None keeps the
    split stored in the shard.
    """
    st = _store(store)
    by_story = {int(s): name for name, stories in (splits or {}).items() for s in stories}
    rows = []
    for s, targets in store_targets(st).items():
        meta = st.meta(s)
        split = by_story.get(meta.story, meta.split) if splits else meta.split
        for a, b in pairs:
            if a in targets and b in targets:
                ya, yb = st.labels(s, a).to_numpy(), st.labels(s, b).to_numpy()
                rows.append(
                    {
                        "session": s,
                        "listener": meta.listener,
                        "story": meta.story,
                        "target_a": a,
                        "target_b": b,
                        "ccc": ccc(ya, yb),
                        "split": split,
                    }
                )
    table = pd.DataFrame(rows, columns=[*COLUMNS, "split"])
    if table.empty:
        names = ", ".join(f"{a} and {b}" for a, b in pairs)
        raise AgreementError(
            f"no session of {st.root} has both {names}; "
            "add the missing ratings with `featurestore labels DIR --target NAME`"
        )
    return table


def agreement_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Both protocols per pair, over all sessions (split ``all``) and per split."""
    rows = []
    for (a, b), part in table.groupby(["target_a", "target_b"], sort=False):
        groups = [("all", part)] + [(str(k), g) for k, g in part.groupby("split", sort=True)]
        for split, g in groups:
            prot = ccc_protocols(g)
            rows.append(
                {
                    "target_a": a,
                    "target_b": b,
                    "split": split,
                    "n_sessions": len(g),
                    "ccc_personalized": prot["personalized"],
                    "ccc_generalized": prot["generalized"],
                    "ccc_min": float(g.ccc.min()),
                    "ccc_max": float(g.ccc.max()),
                }
            )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


# ----------------------------------------------------------------------------- cross-target
def _sessions_with(store, targets: Sequence[str], splits: dict[str, list[int]]) -> list[str]:
    stories = {int(s) for v in splits.values() for s in v}
    st = _store(store)
    out = []
    for s, have in store_targets(st).items():
        if all(t in have for t in targets) and st.meta(s).story in stories:
            out.append(s)
    return out


def pick_feature_set(cfg: ExperimentConfig, store, sessions: Sequence[str]) -> str | None:
    """The feature set of ``cfg.feature_set`` with the most channels that every one of
    ``sessions`` has (first on ties); None when no set is complete."""
    st = _store(store)
    have = [set(st.channel_keys(s)) for s in sessions]
    ranked = sorted(cfg.feature_set, key=lambda n: -len(cfg.feature_sets[n]))
    for name in ranked:
        if all(set(cfg.feature_sets[name]) <= h for h in have):
            return name
    return None


def cross_target_trial(cfg: ExperimentConfig, feature_set: str) -> Trial:
    """The fixed configuration of the cross-target table: the first non-baseline configuration
    of ``cfg``'s grid on ``feature_set`` (the baseline itself when the grid has nothing else)."""
    if feature_set not in cfg.feature_sets:
        raise AgreementError(
            f"feature set {feature_set!r} is not defined in the config ({', '.join(cfg.feature_sets)})"
        )
    trials = expand(replace(cfg, feature_set=[feature_set]))
    return next((t for t in trials if not model_spec(t.model).baseline), trials[0])


def cross_target_table(
    cfg: ExperimentConfig, store, pairs: Sequence[tuple[str, str]], feature_set: str | None = None
) -> tuple[pd.DataFrame, Trial | None]:
    """Train :func:`cross_target_trial` on each target of each pair; score on both targets.

    Only sessions holding both targets of a pair take part. Returns the table
    (``CROSS_COLUMNS``, one row per trained-on x scored-against x split) and the trial used
    (None, with an empty table, when no feature set is complete in those sessions).
    """
    st = _store(store)
    rows: list[dict] = []
    seen: set[tuple[str, str, str]] = set()
    # (trial, sessions) -> its result: the self model is fitted once
    results: dict[tuple[Trial, tuple[str, ...]], TrialResult] = {}
    used: Trial | None = None
    for a, b in pairs:
        sessions = _sessions_with(st, (a, b), cfg.splits)
        if not sessions:
            continue
        fs = feature_set or pick_feature_set(cfg, st, sessions)
        if fs is None:
            return pd.DataFrame(columns=CROSS_COLUMNS), None
        base = cross_target_trial(cfg, fs)
        for train_on, other in ((a, b), (b, a)):
            trial = replace(base, target=train_on)
            used = used or trial
            key = (trial, tuple(sessions))
            if key not in results:
                tables = load_sessions(
                    st, list(trial.channels), target=train_on, splits=cfg.splits, sessions=sessions
                )
                results[key] = evaluate_trial(trial, window_sessions(tables, trial.window_key()))
            result = results[key]
            scored = result.scores.copy()
            for scored_against in (train_on, other):
                if any((train_on, scored_against, split) in seen for split in scored.split):
                    continue  # e.g. self scored on self again for the next observer: reported once
                seen.update((train_on, scored_against, split) for split in scored.split)
                if scored_against != train_on:
                    scored["ccc"] = [
                        ccc(st.labels(s, other).to_numpy(), result.predictions[s])
                        for s in scored.session
                    ]
                for split, g in scored.groupby("split", sort=False):
                    prot = ccc_protocols(g)
                    rows.append(
                        {
                            "trained_on": train_on,
                            "scored_against": scored_against,
                            "feature_set": fs,
                            "split": split,
                            "ccc_personalized": prot["personalized"],
                            "ccc_generalized": prot["generalized"],
                        }
                    )
    return pd.DataFrame(rows, columns=CROSS_COLUMNS), used


# ----------------------------------------------------------------------------- report
def _fmt(v: Any) -> str:
    """A CCC (a number or NaN read off a DataFrame row) with 3 decimals, ``n/a`` for NaN."""
    return "n/a" if pd.isna(v) else f"{v:.3f}"


def _index_rows(frame: pd.DataFrame) -> Iterator[tuple[tuple[Any, ...], pd.Series]]:
    """``(index, row)`` of each row of a frame whose index is a MultiIndex (a tuple each)."""
    for index, row in frame.iterrows():
        assert isinstance(index, tuple), "a MultiIndex labels its rows with tuples"
        yield index, row


def agreement_markdown(
    table: pd.DataFrame,
    summary: pd.DataFrame,
    cross: pd.DataFrame,
    trial: Trial | None,
    note: str = "",
) -> str:
    """``agreement.md``: the protocol summary, the per-session CCC, and the cross-target table."""
    lines = [
        "# Self vs. observer agreement",
        "",
        "Lin's CCC between two label targets of the same session (population variance, Pearson r 0 when",
        "undefined); personalized = mean over listeners of each listener's mean over stories, generalized =",
        "mean over stories of each story's mean over listeners.",
        "",
    ]
    lines += markdown.table(
        ["target A", "target B", "sessions", "split", "CCC pers.", "CCC gen.", "min", "max"],
        (
            [
                r.target_a,
                r.target_b,
                r.n_sessions,
                r.split,
                _fmt(r.ccc_personalized),
                _fmt(r.ccc_generalized),
                _fmt(r.ccc_min),
                _fmt(r.ccc_max),
            ]
            for r in summary.itertuples()
        ),
    )
    lines += ["", "## Per session", ""]
    pairs = list(dict.fromkeys(zip(table.target_a, table.target_b, strict=True)))
    wide = table.pivot_table(
        index=["listener", "story", "session", "split"],
        columns=["target_a", "target_b"],
        values="ccc",
    )
    lines += markdown.table(
        ["session", "split"] + [f"{a} vs {b}" for a, b in pairs],
        (
            [session, split] + [_fmt(row.get(p, np.nan)) for p in pairs]
            for (_, _, session, split), row in _index_rows(wide.sort_index())
        ),
    )
    lines += ["", "## Cross-target: a model trained for one target, scored on the other", ""]
    if trial is None or cross.empty:
        lines.append(
            note
            or "Not computed: no feature set of the config is complete in the sessions holding both targets."
        )
    else:
        lines += [
            f"Configuration (fixed, the config's first non-baseline one): {trial.label()}; "
            f"feature set `{trial.feature_set}` ({', '.join(trial.channels)}). Trained on the training stories "
            "of one target, its validation and test predictions are scored against each target.",
            "",
        ]
        splits = list(dict.fromkeys(cross.split))
        rows = []
        for (t, sa), g in cross.groupby(["trained_on", "scored_against"], sort=False):
            g = g.set_index("split")
            rows.append(
                [t, sa]
                + [
                    _fmt(g.loc[s, c]) if s in g.index else "n/a"
                    for s in splits
                    for c in ("ccc_personalized", "ccc_generalized")
                ]
            )
        lines += markdown.table(
            ["trained on", "scored against"]
            + [f"{s} {p}" for s in splits for p in ("pers.", "gen.")],
            rows,
        )
    return "\n".join(lines) + "\n"


@dataclass
class AgreementResult:
    """What :func:`agreement` computed and wrote."""

    table: pd.DataFrame  # per session and pair (COLUMNS + split)
    summary: pd.DataFrame  # per pair and split, both protocols
    cross: pd.DataFrame  # cross-target table (may be empty)
    trial: Trial | None  # the cross-target configuration
    run_id: str = ""
    files: list[Path] = field(default_factory=list)


def agreement(
    cfg: ExperimentConfig,
    store="features",
    targets: Sequence[str] | None = None,
    out_dir: str | Path = "reports",
    tracking_uri: str | None = None,
    feature_set: str | None = None,
    cross: bool = True,
) -> AgreementResult:
    """Compare label targets (see the module docstring), write ``agreement.{csv,md,png}`` into
    ``out_dir`` and log them to MLflow (run ``agreement`` in ``cfg.tracking.experiment``).

    ``targets``: two target names, or None for ``valence_self`` against every other target.
    ``feature_set``: the cross-target model's feature set (default: the config's largest set
    that every compared session has). ``cross`` False skips the cross-target table.
    """
    st = _store(store)
    raters, lags = inter_rater_table(st, cfg.gold_standard.max_lag_s)
    try:
        pairs = target_pairs(st, targets)
    except AgreementError:
        if targets is not None or raters.empty:
            raise
        return _raters_only(cfg, st, raters, lags, Path(out_dir), tracking_uri)
    table = agreement_table(st, pairs, cfg.splits)
    summary = agreement_summary(table)
    cross_df, trial = (
        cross_target_table(cfg, st, pairs, feature_set)
        if cross
        else (pd.DataFrame(columns=CROSS_COLUMNS), None)
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "agreement.csv", out / "agreement.md", out / "agreement.png"]
    table.sort_values(["target_b", "listener", "story"], kind="stable")[COLUMNS].to_csv(
        files[0], index=False
    )
    note = "" if cross else "Not computed (--no-cross)."
    files[1].write_text(
        agreement_markdown(table, summary, cross_df, trial, note)
        + "\n"
        + inter_rater_markdown(raters, lags)
    )
    files += write_raters(out, raters, lags)
    example = table.sort_values(["listener", "story"]).session.iloc[0]
    series = {
        t: st.labels(example, t).to_numpy()
        for t in dict.fromkeys([p for ab in pairs for p in ab])
        if t in st.label_targets(example)
    }
    plot_agreement(table, summary, files[2], example=(example, series))

    tracker = Tracker(tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    fingerprint, _ = store_fingerprint(st)
    run_id = tracker.start_run(
        "agreement",
        tags={"agreement": "true", "store_fingerprint": fingerprint, **code_version().tags()},
    )
    params = {"pairs": ";".join(f"{a}~{b}" for a, b in pairs), "store": str(st.root)}
    if trial is not None:
        params.update({f"cross.{k}": v for k, v in trial.params().items() if k != "target"})
    metrics = {}
    for r in summary.itertuples():
        for p in ("personalized", "generalized"):
            metrics[f"agreement.{r.target_a}.vs.{r.target_b}.{r.split}.ccc_{p}"] = getattr(
                r, f"ccc_{p}"
            )
    metrics.update(rater_metrics(raters))
    for r in cross_df.itertuples():
        for p in ("personalized", "generalized"):
            metrics[f"cross.{r.trained_on}.on.{r.scored_against}.{r.split}.ccc_{p}"] = getattr(
                r, f"ccc_{p}"
            )
    try:
        tracker.log(run_id, params=params, metrics=metrics)
        with tempfile.TemporaryDirectory() as tmp:
            for f in files:
                (Path(tmp) / f.name).write_bytes(f.read_bytes())
            resolved = {"config": cfg.to_dict(), "code": code_version().tags()}
            if trial is not None:
                resolved["cross"] = {"trial": trial.params(), "resolved": resolved_params(trial)}
            (Path(tmp) / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
            tracker.log_artifacts(run_id, tmp, "agreement")
    except BaseException:
        tracker.finish(run_id, "FAILED")
        raise
    tracker.finish(run_id, "FINISHED")
    return AgreementResult(table, summary, cross_df, trial, run_id, files)


def _raters_only(
    cfg: ExperimentConfig,
    st: Store,
    raters: pd.DataFrame,
    lags: pd.DataFrame,
    out: Path,
    tracking_uri: str | None,
) -> AgreementResult:
    """A store with raters but no second target: the inter-rater part alone."""
    out.mkdir(parents=True, exist_ok=True)
    md = out / "agreement.md"
    md.write_text("# Agreement\n\n" + inter_rater_markdown(raters, lags))
    files = [md, *write_raters(out, raters, lags)]
    tracker = Tracker(tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    fingerprint, _ = store_fingerprint(st)
    run_id = tracker.start_run(
        "agreement",
        tags={"agreement": "true", "store_fingerprint": fingerprint, **code_version().tags()},
    )
    try:
        tracker.log(run_id, params={"store": str(st.root)}, metrics=rater_metrics(raters))
        with tempfile.TemporaryDirectory() as tmp:
            for f in files:
                (Path(tmp) / f.name).write_bytes(f.read_bytes())
            tracker.log_artifacts(run_id, tmp, "agreement")
    except BaseException:
        tracker.finish(run_id, "FAILED")
        raise
    tracker.finish(run_id, "FINISHED")
    empty = pd.DataFrame(columns=COLUMNS)
    return AgreementResult(
        empty,
        pd.DataFrame(columns=SUMMARY_COLUMNS),
        pd.DataFrame(columns=CROSS_COLUMNS),
        None,
        run_id,
        files,
    )
