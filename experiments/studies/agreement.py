"""Self versus observer: ``experiments agreement`` (:func:`agreement`) compares label targets two
by two, per session (:func:`agreement_table`) and by a model trained on one and scored on the other
(:func:`cross_target_table`), beside the inter-rater agreement (:mod:`.inter_rater`). What each
number means: docs/results.md, "Observer ratings and self-observer agreement"."""

from __future__ import annotations

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
from ..config.options import TRACKS
from ..config.schema import ExperimentConfig
from ..data.dataset import load_sessions
from ..errors import ExperimentsError
from ..evaluation import markdown
from ..evaluation.evaluate import TrialResult, evaluate_trial, window_sessions
from ..evaluation.metrics import ccc, protocol_means
from ..evaluation.plots import plot_agreement
from ..tracking.child_runs import resolved_params
from ..tracking.provenance import code_version
from ..tracking.redact import mask_all
from ..tracking.summary import log_files
from ..tracking.tracker import Tracker
from .corpus_config import corpus_note
from .inter_rater import (
    StoreLike,
    as_store,
    inter_rater_markdown,
    inter_rater_table,
    rater_metrics,
    write_raters,
)
from .parent_run import store_fingerprint

SELF_TARGET = "valence_self"
#: columns of ``agreement.csv`` (a contract: docs/design.md#reports)
COLUMNS = ["session", "listener", "story", "target_a", "target_b", "ccc"]
#: columns of the per-pair summary (both protocols, per split)
SUMMARY_COLUMNS = ["target_a", "target_b", "split", "n_sessions"] + [
    f"ccc_{c}" for c in ("personalized", "generalized", "min", "max")
]
#: columns of the cross-target table
CROSS_COLUMNS = ["trained_on", "scored_against", "feature_set", "split"] + [
    f"ccc_{c}" for c in ("personalized", "generalized")
]


class AgreementError(ExperimentsError, ValueError):
    """Nothing to compare (a target is missing everywhere); the message says how to add it."""


def store_targets(store: StoreLike) -> dict[str, list[str]]:
    """Session -> its label targets, for every shard of the store."""
    st = as_store(store)
    return {s: st.label_targets(s) for s in st.list_sessions()}


def target_pairs(store: StoreLike, targets: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """``targets`` (two names) as given, else ``valence_self`` against every other target of the
    store; :class:`AgreementError` when a named target is in no shard, or there is no second."""
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


def targets_of(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The targets of ``pairs``, each once, in order."""
    return list(dict.fromkeys(t for ab in pairs for t in ab))


def agreement_table(
    store: StoreLike, pairs: Sequence[tuple[str, str]], splits: dict[str, list[int]] | None = None
) -> pd.DataFrame:
    """One row per session and pair holding both targets: ``COLUMNS`` plus ``split`` (from
    ``splits``, split -> stories; None: the shard's)."""
    st = as_store(store)
    by_story = {int(s): name for name, stories in (splits or {}).items() for s in stories}
    rows = []
    for s, targets in store_targets(st).items():
        meta = st.meta(s)
        split = by_story.get(meta.story, meta.split) if splits else meta.split
        for a, b in pairs:
            if a in targets and b in targets:
                value = ccc(st.labels(s, a).to_numpy(), st.labels(s, b).to_numpy())
                rows.append([s, meta.listener, meta.story, a, b, value, split])
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
            prot = protocol_means(g)
            rows.append([a, b, split, len(g), prot["personalized"], prot["generalized"]])
            rows[-1] += [float(g.ccc.min()), float(g.ccc.max())]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


# ----------------------------------------------------------------------------- cross-target
def _sessions_with(
    store: StoreLike, targets: Sequence[str], splits: dict[str, list[int]]
) -> list[str]:
    """The sessions holding every one of ``targets``, of the stories of ``splits`` (empty: all)."""
    stories = {int(s) for v in splits.values() for s in v}
    st = as_store(store)
    return [
        s
        for s, have in store_targets(st).items()
        if all(t in have for t in targets) and (not splits or st.meta(s).story in stories)
    ]


def pick_feature_set(
    cfg: ExperimentConfig, store: StoreLike, sessions: Sequence[str]
) -> str | None:
    """The set of ``cfg.feature_set`` with the most channels every one of ``sessions`` has (first
    on ties); None when no set is complete."""
    st = as_store(store)
    have = [set(st.channel_keys(s)) for s in sessions]
    ranked = sorted(cfg.feature_set, key=lambda n: -len(cfg.feature_sets[n]))
    return next((n for n in ranked if all(set(cfg.feature_sets[n]) <= h for h in have)), None)


def cross_target_trial(cfg: ExperimentConfig, feature_set: str) -> Trial:
    """The cross-target configuration: the first non-baseline one of ``cfg``'s grid on ``feature_set``."""
    if feature_set not in cfg.feature_sets:
        raise AgreementError(
            f"feature set {feature_set!r} is not defined in the config ({', '.join(cfg.feature_sets)})"
        )
    trials = expand(replace(cfg, feature_set=[feature_set]))
    return next((t for t in trials if not model_spec(t.model).baseline), trials[0])


def cross_target_table(
    cfg: ExperimentConfig,
    store: StoreLike,
    pairs: Sequence[tuple[str, str]],
    feature_set: str | None = None,
) -> tuple[pd.DataFrame, Trial | None]:
    """Train :func:`cross_target_trial` on each target of each pair (the sessions holding both),
    score on both: the table (``CROSS_COLUMNS``) and the trial (None: no feature set complete)."""
    st = as_store(store)
    rows: list[list] = []
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
                    prot = protocol_means(g)
                    means = [prot["personalized"], prot["generalized"]]
                    rows.append([train_on, scored_against, fs, split, *means])
    return pd.DataFrame(rows, columns=CROSS_COLUMNS), used


# ----------------------------------------------------------------------------- report
def _index_rows(frame: pd.DataFrame) -> Iterator[tuple[tuple[Any, ...], pd.Series]]:
    """``(index, row)`` of each row of a frame whose index is a MultiIndex (a tuple each)."""
    for index, row in frame.iterrows():
        assert isinstance(index, tuple), "a MultiIndex labels its rows with tuples"
        yield index, row


AGREEMENT_INTRO = (
    "Lin's CCC between two label targets of the same session (population variance, Pearson r 0 when",
    "undefined); personalized = mean over listeners of each listener's mean over stories, generalized =",
    "mean over stories of each story's mean over listeners.",
)


def agreement_markdown(
    table: pd.DataFrame,
    summary: pd.DataFrame,
    cross: pd.DataFrame,
    trial: Trial | None,
    note: str = "",
) -> str:
    """``agreement.md``: the summary, the per-session CCC and the cross-target table (else ``note``)."""
    n = markdown.number
    rows = (
        [r.target_a, r.target_b, r.n_sessions, r.split]
        + [n(r.ccc_personalized), n(r.ccc_generalized), n(r.ccc_min), n(r.ccc_max)]
        for r in summary.itertuples()
    )
    head = ["target A", "target B", "sessions", "split", "CCC pers.", "CCC gen.", "min", "max"]
    self_pairs = SELF_TARGET in set(summary.target_a) | set(summary.target_b)
    title = "Self vs. observer agreement" if self_pairs else "Agreement between label targets"
    lines = [f"# {title}", "", *AGREEMENT_INTRO, ""]
    lines += markdown.table(head, rows)
    lines += ["", "## Per session", ""]
    pairs = list(dict.fromkeys(zip(table.target_a, table.target_b, strict=True)))
    keys = ["listener", "story", "session", "split"]
    wide = table.pivot_table(index=keys, columns=["target_a", "target_b"], values="ccc")
    lines += markdown.table(
        ["session", "split"] + [f"{a} vs {b}" for a, b in pairs],
        (
            [session, split] + [n(row.get(p, np.nan)) for p in pairs]
            for (_, _, session, split), row in _index_rows(wide.sort_index())
        ),
    )
    lines += ["", "## Cross-target: a model trained for one target, scored on the other", ""]
    lines += _cross_section(cross, trial, note)
    return "\n".join(lines) + "\n"


def _cross_section(cross: pd.DataFrame, trial: Trial | None, note: str) -> list[str]:
    """The cross-target part of ``agreement.md``: per (trained on, scored against), each split's two protocols."""
    if trial is None or cross.empty:
        complete = "no feature set of the config is complete in the sessions holding both targets"
        return [note or f"Not computed: {complete}."]
    splits = list(dict.fromkeys(cross.split))
    rows = []
    for (t, sa), g in cross.groupby(["trained_on", "scored_against"], sort=False):
        g = g.set_index("split")
        cells = (g.loc[s, f"ccc_{p}"] if s in g.index else None for s in splits for p in TRACKS)
        rows.append([t, sa, *("n/a" if c is None else markdown.number(c) for c in cells)])
    head = [
        "trained on",
        "scored against",
        *(f"{s} {p}" for s in splits for p in ("pers.", "gen.")),
    ]
    return [
        f"Configuration (fixed, the config's first non-baseline one): {trial.label()}; "
        f"feature set `{trial.feature_set}` ({', '.join(trial.channels)}). Trained on the training stories "
        "of one target, its validation and test predictions are scored against each target.",
        "",
        *markdown.table(head, rows),
    ]


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
    store: StoreLike = "features",
    targets: Sequence[str] | None = None,
    out_dir: str | Path = "reports",
    tracking_uri: str | None = None,
    feature_set: str | None = None,
    cross: bool = True,
) -> AgreementResult:
    """Compare label targets; write ``agreement.{csv,md,png}`` (and the inter-rater CSVs) into
    ``out_dir`` and log them (run ``agreement``). ``targets``: two names, or None (:func:`target_pairs`);
    ``feature_set``: the cross-target model's (default :func:`pick_feature_set`); ``cross`` False skips it."""
    st = as_store(store)
    raters, lags = inter_rater_table(st, cfg.gold_standard.max_lag_s)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        pairs = target_pairs(st, targets)
    except AgreementError:
        if targets is not None or raters.empty:
            raise
        # a store with raters but no second target: the inter-rater part alone
        (out / "agreement.md").write_text("# Agreement\n\n" + inter_rater_markdown(raters, lags))
        files = [out / "agreement.md", *write_raters(out, raters, lags)]
        params = {"store": str(st.root)}
        run_id = _log_run(cfg, st, tracking_uri, params, rater_metrics(raters), files)
        empty = [pd.DataFrame(columns=c) for c in (COLUMNS, SUMMARY_COLUMNS, CROSS_COLUMNS)]
        return AgreementResult(empty[0], empty[1], empty[2], None, run_id, files)
    table = agreement_table(st, pairs, cfg.splits)
    summary = agreement_summary(table)
    none = (pd.DataFrame(columns=CROSS_COLUMNS), None)
    cross_df, trial = cross_target_table(cfg, st, pairs, feature_set) if cross else none
    files = [out / "agreement.csv", out / "agreement.md", out / "agreement.png"]
    ordered = table.sort_values(["target_b", "listener", "story"], kind="stable")
    ordered[COLUMNS].to_csv(files[0], index=False)
    md = agreement_markdown(
        table, summary, cross_df, trial, "" if cross else "Not computed (--no-cross)."
    )
    layout, note = corpus_note(st)  # a manifest corpus's report in its words (person, group)
    keep = [*targets_of(pairs), *(cfg.feature_sets if trial is not None else ())]
    md = note + layout.in_words(md, keep)
    files[1].write_text(md + "\n" + inter_rater_markdown(raters, lags))
    files += write_raters(out, raters, lags)
    example = table.sort_values(["listener", "story"]).session.iloc[0]
    shown = [t for t in targets_of(pairs) if t in st.label_targets(example)]
    series = {t: st.labels(example, t).to_numpy() for t in shown}
    plot_agreement(table, summary, files[2], example=(example, series))
    params = {"pairs": ";".join(f"{a}~{b}" for a, b in pairs), "store": str(st.root)}
    resolved: dict[str, object] = {"config": mask_all(cfg.to_dict()), "code": code_version().tags()}
    if trial is not None:
        params.update({f"cross.{k}": v for k, v in trial.params().items() if k != "target"})
        resolved["cross"] = {"trial": trial.params(), "resolved": resolved_params(trial)}
    metrics = _metrics(summary, cross_df) | rater_metrics(raters)
    config = yaml.safe_dump(resolved, sort_keys=False)
    run_id = _log_run(cfg, st, tracking_uri, params, metrics, files, config)
    return AgreementResult(table, summary, cross_df, trial, run_id, files)


def _metrics(summary: pd.DataFrame, cross: pd.DataFrame) -> dict[str, float]:
    """The run's metrics: each pair's and each cross-target row's protocol means per split."""
    metrics = {}
    for p in TRACKS:
        for r in summary.itertuples():
            metrics[f"agreement.{r.target_a}.vs.{r.target_b}.{r.split}.ccc_{p}"] = getattr(
                r, f"ccc_{p}"
            )
        for r in cross.itertuples():
            metrics[f"cross.{r.trained_on}.on.{r.scored_against}.{r.split}.ccc_{p}"] = getattr(
                r, f"ccc_{p}"
            )
    return metrics


def _log_run(
    cfg: ExperimentConfig,
    st: Store,
    tracking_uri: str | None,
    params: dict[str, Any],
    metrics: dict[str, float],
    files: Sequence[Path],
    config: str | None = None,
) -> str:
    """The MLflow run ``agreement``: params, metrics, ``files`` and ``config`` (``config.yaml``); its id."""
    uri = tracking_uri or cfg.tracking.uri
    tracker = Tracker(uri, cfg.tracking.experiment, cfg.tracking.artifacts)
    fingerprint, _ = store_fingerprint(st)
    tags = {"agreement": "true", "store_fingerprint": fingerprint, **code_version().tags()}
    run_id = tracker.start_run("agreement", tags=tags)
    contents: dict[str, bytes | str] = {f.name: f.read_bytes() for f in files}
    if config is not None:
        contents["config.yaml"] = config
    try:
        tracker.log(run_id, params=params, metrics=metrics)
        log_files(tracker, run_id, contents, "agreement")
    except BaseException:
        tracker.finish(run_id, "FAILED")
        raise
    tracker.finish(run_id, "FINISHED")
    return run_id
