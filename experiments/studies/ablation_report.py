"""The ablation's report, ``ablation.md`` (:func:`ablation_markdown`); what each part means:
docs/results.md, "The ablation in detail"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

from ..config.fusion import FUSED_SET
from ..config.metrics import DEFAULT_METRIC, MetricSpec, get_metric
from ..config.options import CHOSEN_UNSEEN_MARK, CHOSEN_UNSEEN_NOTE, TRACKS
from ..evaluation import markdown

if TYPE_CHECKING:
    from .explain import Explanation

#: Barros et al. (2019), Table IV, test set: per metric the paper reports (CCC only), the
#: (personalized, generalized) values of the baseline per feature set
PAPER_TEST = {
    DEFAULT_METRIC: {"speaker": (0.11, 0.13), "listener": (0.19, 0.23), "both": (0.17, 0.19)}
}

SELECTION_SPLITS = ("val", "loso", "cv")

#: ``unseen_selection`` -> the ablation's words for its unseen-listener column
UNSEEN_BULLETS = {
    "nested": "each left-out listener's generalized configuration chosen on the other listeners'"
    " selection split with models fitted without them (nested; `ablation_unseen.csv` names each"
    " choice), scored on that listener's test stories; the mean over listeners, no interval",
    "chosen": "the generalized choice, made with every listener (the left-out one included: not"
    " nested), refitted without each listener in turn and scored on that listener",
    "fixed": "the configuration named in the config before any data, refitted without each"
    " listener in turn and scored on that listener",
}

INTRO = (
    "{metric} of each track's best configuration (chosen on validation); on test, [95 % skewness-corrected t interval",
    "over listeners, the test stories held fixed]. Its coverage, simulated: 0.93-0.95 with 4-10 listeners who",
    "differ by degree; 0.88-0.92 (0.90 with 6 listeners, 0.92 with 10) when 15 % of them react against the",
    "story, which a split without such a listener cannot show (docs/results.md, Intervals). The selection",
    "split's numbers are the maximum over the grid that chose them: no interval, and they overstate what a",
    "new split would give.",
)
TRACK_BULLETS = (
    "- **personalized**: the best of every configuration, including those that use who is listening",
    "  (per-listener models, calibration or rescaling, identity as a feature); a model that does not know",
    "  who is listening may be submitted to this track too. {metric} per session, mean over each listener's",
    "  stories, then over listeners.",
    "- **generalized**: the best configuration that does not know who is listening; mean over each story's",
    "  listeners, then over stories. On a complete listener x story table both averages are the same number:",
    "  the tracks differ by their models.",
)
CHANCE_BULLET = (
    "- **chance**: 95th percentile of the protocol mean when each session's labels are scored against a",
    "  prediction at that session's own prediction level and scale but the time course of another story's",
    "  block of predictions, the block shifted as a whole by one lag of at least 10 s (1,000 draws): what",
    "  the predictions share across a story's listeners stays in the null. A {metric} below it cannot be told",
    "  from chance. A constant (dummy) prediction has {metric} 0 by construction: a baseline, not the chance level.",
)
FUSION_BULLET = (
    "- **late fusion**: each member feature set's configuration chosen for the track, blended by weights",
    "  fitted on the training stories' out-of-fold predictions (validation and test labels never reach",
    "  the blend); early fusion is the set that lists both roles' channels (`both`). Its track follows its",
    "  members: personalized if one of them uses who is listening. No unseen-listener score (not refitted",
    "  without each listener).",
)
#: :data:`INTRO` and :data:`TRACK_BULLETS` of an ablation whose metric is one value over each
#: split's sessions concatenated (``averaging: concatenated``): no interval, no chance level
CONCATENATED_INTRO = (
    "{metric} of each track's best configuration (chosen on validation), one {metric} over each split's sessions",
    "concatenated (`averaging: concatenated`, as AVEC): no interval and no chance level (those are",
    "over listeners' per-session {metric}s). The selection split's numbers are the maximum over the grid that",
    "chose them: they overstate what a new split would give.",
)
CONCATENATED_BULLETS = (
    "- **personalized**: the best of every configuration, including those that use who is listening",
    "  (per-listener models, calibration or rescaling, identity as a feature).",
    "- **generalized**: the best configuration that does not know who is listening. Both tracks score",
    "  the split's sessions concatenated: they differ by their models.",
)
COMPARISONS_INTRO = (
    "On test only. Mean over listeners of each listener's mean {metric} difference (first minus second),",
    "[95 % skewness-corrected t interval over listeners], a two-sided sign-flip permutation p-value",
    "that flips each listener's difference, Holm's adjustment over the whole table (the family), and",
    "the smallest p the test can give with that many listeners (2 / 2^listeners): a p at that floor",
    "is the strongest evidence the split can hold, however large the difference.",
)
COMPARISONS_HEAD = ["comparison", "track", "split", "mean difference [95 % interval]", "p"]
COMPARISONS_HEAD += ["Holm p", "smallest p", "sessions", "listeners"]
IMPORTANCE_INTRO = (
    "Drop in test {metric} (the track's averaging) when a group's features are moved in time (each",
    "session's block circularly shifted by at least 10 s), mean over repeats, [95 % interval over",
    "listeners]; the fitted model is the chosen one's. An interval per group, not adjusted for the",
    "number of groups; correlated groups share their credit. Tables: `importance_<set>_<track>.csv`.",
)
REFERENCE_INTRO = (
    "Barros et al., *The OMG-Empathy Dataset*, ACII 2019, Table IV: VGG16-LSTM + SoundNet baseline, SVM fusion.",
    "Measured on the real corpus; not comparable with numbers from the demo or synthetic corpus.",
)
#: ``causal_<track>`` -> the chosen configuration's note
CAUSAL_NOTES = {"true": ", causal", "false": ", reads future frames"}
REFERENCE_NOTE = "A challenge entry, Tan et al. 2018 (arXiv:1812.04891), reached 0.14 / 0.14 on the same test set."


def ablation_markdown(
    df: pd.DataFrame,
    title: str = "",
    pairs: pd.DataFrame | None = None,
    unseen_selection: str = "nested",
    importance: Sequence[str] = (),
    metric: str = DEFAULT_METRIC,
    averaging: str = "sessions",
    reference: bool = True,
) -> str:
    """The table in the shape of the paper's Table IV, the paired comparisons, the chosen
    configurations, ``importance`` (:func:`importance_section`) and (``reference``) the paper's
    numbers, in the words of ``metric``; ``unseen_selection``: a key of :data:`UNSEEN_BULLETS`."""
    m = get_metric(metric)
    joined = averaging == "concatenated"
    intro = CONCATENATED_INTRO if joined else INTRO
    lines = [f"# {title or 'Speaker / listener / both ablation'}", "", *_words(intro, m), ""]
    if not m.higher_is_better:
        lines += [f"Chosen and compared by `{m.name}` (lower is better): every number is its.", ""]
    lines += [*(f"Note: {t}." for t in m.lacks()), *([""] if m.lacks() else [])]
    lines += results_table(df, unseen_selection, m)
    lines += ["", *_words(CONCATENATED_BULLETS if joined else TRACK_BULLETS, m)]
    lines += [
        f"- **unseen listeners ({unseen_selection})**: how well the generalized track predicts a person it has",
        f"  never seen: {UNSEEN_BULLETS.get(unseen_selection, '')}.",
        *(() if joined or not m.chance else _words(CHANCE_BULLET, m)),
        *(FUSION_BULLET if FUSED_SET in set(df.feature_set) else ()),
    ]
    lines += comparisons_section(pairs, m)
    lines += chosen_section(df)
    lines += [*importance, *(reference_section(m) if reference else ())]
    return "\n".join(lines) + "\n"


def _words(text: Sequence[str], m: MetricSpec) -> list[str]:
    """Report prose naming the metric ``{metric}`` as ``m`` is titled."""
    return [line.format(metric=m.title) for line in text]


def results_table(df: pd.DataFrame, unseen_selection: str, m: MetricSpec) -> list[str]:
    """The ablation table: one row per feature set, each split's two tracks, the last split's
    unseen-listener score and chance levels; the note on a ``chosen`` unseen score when marked."""
    splits = list(dict.fromkeys(df.split))
    head = ["features"]
    for s in splits:
        tag = f"{s} (selection)" if s in SELECTION_SPLITS else s
        head += [f"{tag} personalized", f"{tag} generalized"]
    head += [
        f"{splits[-1]} unseen listeners ({unseen_selection})",
        f"chance {splits[-1]} (pers. / gen.)",
    ]
    rows = [
        _table_row(df[df.feature_set == fs].set_index("split"), splits, unseen_selection, m)
        for fs in dict.fromkeys(df.feature_set)
    ]
    marked = any(CHOSEN_UNSEEN_MARK in r[-2] for r in rows)
    return markdown.table(head, rows) + (["", CHOSEN_UNSEEN_NOTE + "."] if marked else [])


def _table_row(
    part: pd.DataFrame, splits: list[str], unseen_selection: str, m: MetricSpec
) -> list[str]:
    """One feature set's cells of :func:`results_table` (``part``: its rows by split)."""
    cells = [str(part.feature_set.iloc[0])]
    for s in splits:
        r = part.loc[s]
        for track in TRACKS:
            name = m.column(track)
            cells.append(markdown.interval(r[name], r[f"{name}_ci_low"], r[f"{name}_ci_high"]))
    last, column = part.loc[splits[-1]], m.column("unseen_listener")
    unseen = markdown.interval(last[column], last[f"{column}_ci_low"], last[f"{column}_ci_high"])
    flattered = unseen_selection == "chosen" and pd.notna(last[column])
    cells.append(f"{unseen} {CHOSEN_UNSEEN_MARK}" if flattered else unseen)
    pers, gen = last.chance_personalized_q95, last.chance_generalized_q95
    cells.append(f"{pers:.3f} / {gen:.3f}" if pd.notna(pers) or pd.notna(gen) else "n/a")
    return cells


def comparisons_section(pairs: pd.DataFrame | None, m: MetricSpec) -> list[str]:
    """``## Paired comparisons``: the rows of ``ablation_comparisons.csv`` (none without any)."""
    if pairs is None or pairs.empty:
        return []
    rows = (
        [r.comparison, r.track, r.split, markdown.interval(r.mean_diff, r.ci_low, r.ci_high)]
        + [f"{r.p_value:.3f}", f"{r.p_holm:.3f}", f"{r.p_min:.3f}", r.n_sessions, r.n_listeners]
        for r in pairs.itertuples()
    )
    intro = ["", "## Paired comparisons", "", *_words(COMPARISONS_INTRO, m), ""]
    return intro + markdown.table(COMPARISONS_HEAD, rows)


def chosen_section(df: pd.DataFrame) -> list[str]:
    """``## Chosen configurations``: each feature set's run and label per track (its model's
    track where it is the other one, and whether it reads future frames)."""
    lines = ["", "## Chosen configurations", ""]
    for fs, part in df.groupby("feature_set", sort=False):
        first = part.iloc[0]
        for track in ("personalized", "generalized"):
            run = first[f"run_id_{track}"]
            if not run:
                continue
            own = first.get(f"config_track_{track}", track)
            known = isinstance(own, str) and own in ("personalized", "generalized")
            note = f", a {own} configuration" if known and own != track else ""
            causal = CAUSAL_NOTES.get(str(first.get(f"causal_{track}", "")), "")
            label = str(first[f"label_{track}"])
            lines.append(f"- **{fs!s}**, {track}: {label} (run `{run}`{note}{causal})")
    return lines


def importance_section(
    explained: Sequence[Explanation], top: int = 3, metric: str = DEFAULT_METRIC
) -> list[str]:
    """The importance section: per choice, the ``top`` groups of each level with their drop in
    ``metric`` and 95 % interval (no lines without any)."""
    if not explained:
        return []
    m = get_metric(metric)
    rows = []
    for e in explained:
        t = e.table
        for level in dict.fromkeys(t.level):
            best = t[t.level == level].head(top)
            cells = ", ".join(
                f"{r.group} {markdown.interval(r.importance, r.ci_low, r.ci_high)}"
                for r in best.itertuples()
            )
            rows.append([e.trial.feature_set, e.track, level, cells])
    head = ["features", "track", "level", f"top {top}: drop [95 % interval]"]
    section = "## What the chosen configurations use (permutation importance)"
    return ["", section, "", *_words(IMPORTANCE_INTRO, m), ""] + markdown.table(head, rows)


def reference_section(m: MetricSpec) -> list[str]:
    """The paper's published test numbers of ``m``, apart (a line saying there are none)."""
    if m.name not in PAPER_TEST:
        return ["", f"The paper reports no `{m.name}`: no published numbers to read these against."]
    rows = ([fs, f"{p:.2f}", f"{g:.2f}"] for fs, (p, g) in PAPER_TEST[m.name].items())
    table = markdown.table(["features", "personalized", "generalized"], rows)
    head = "## Reference: published results (real OMG-Empathy test set)"
    return ["", head, "", *REFERENCE_INTRO, "", *table, "", REFERENCE_NOTE]
