"""The ablation's report: ``ablation.md`` from its table, comparisons and explanations
(:func:`ablation_markdown`), with the published baseline it is read against."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..config.fusion import FUSED_SET
from ..config.options import CHOSEN_UNSEEN_MARK, CHOSEN_UNSEEN_NOTE
from ..evaluation import markdown

#: Barros et al. (2019), Table IV, test set: (personalized, generalized) CCC of the baseline
PAPER_TEST_CCC = {"speaker": (0.11, 0.13), "listener": (0.19, 0.23), "both": (0.17, 0.19)}

SELECTION_SPLITS = ("val", "loso", "cv")


def cell(value: Any, low: Any = float("nan"), high: Any = float("nan")) -> str:
    if pd.isna(value):
        return "n/a"
    return (
        f"{value:.3f} [{low:.2f}, {high:.2f}]"
        if pd.notna(low) and pd.notna(high)
        else f"{value:.3f}"
    )


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


def ablation_markdown(
    df: pd.DataFrame,
    title: str = "",
    pairs: pd.DataFrame | None = None,
    unseen_selection: str = "nested",
) -> str:
    """The table in the shape of the paper's Table IV (both tracks), then the paired comparisons,
    the chosen configurations, and the paper's published numbers as a separate reference.
    ``unseen_selection``: how the unseen-listener column was chosen (:data:`UNSEEN_BULLETS`)."""
    splits = list(dict.fromkeys(df.split))
    head = ["features"]
    for s in splits:
        tag = f"{s} (selection)" if s in SELECTION_SPLITS else s
        head += [f"{tag} personalized", f"{tag} generalized"]
    head += [
        f"{splits[-1]} unseen listeners ({unseen_selection})",
        f"chance {splits[-1]} (pers. / gen.)",
    ]
    lines = [
        f"# {title or 'Speaker / listener / both ablation'}",
        "",
        "CCC of each track's best configuration (chosen on validation); on test, [95 % skewness-corrected t interval",
        "over listeners, the test stories held fixed]. Its coverage, simulated: 0.93-0.95 with 4-10 listeners who",
        "differ by degree; 0.88-0.92 (0.90 with 6 listeners, 0.92 with 10) when 15 % of them react against the",
        "story, which a split without such a listener cannot show (docs/results.md, Intervals). The selection",
        "split's numbers are the maximum over the grid that chose them: no interval, and they overstate what a",
        "new split would give.",
        "",
    ]
    rows = []
    for fs in dict.fromkeys(df.feature_set):
        part = df[df.feature_set == fs].set_index("split")
        cells = [fs]
        for s in splits:
            r = part.loc[s]
            cells.append(
                cell(r.ccc_personalized, r.ccc_personalized_ci_low, r.ccc_personalized_ci_high)
            )
            cells.append(
                cell(r.ccc_generalized, r.ccc_generalized_ci_low, r.ccc_generalized_ci_high)
            )
        last = part.loc[splits[-1]]
        unseen = cell(
            last.ccc_unseen_listener,
            last.ccc_unseen_listener_ci_low,
            last.ccc_unseen_listener_ci_high,
        )
        flattered = unseen_selection == "chosen" and pd.notna(last.ccc_unseen_listener)
        cells.append(f"{unseen} {CHOSEN_UNSEEN_MARK}" if flattered else unseen)
        cells.append(
            f"{last.chance_personalized_q95:.3f} / {last.chance_generalized_q95:.3f}"
            if pd.notna(last.chance_personalized_q95) or pd.notna(last.chance_generalized_q95)
            else "n/a"
        )
        rows.append(cells)
    lines += markdown.table(head, rows)
    if any(CHOSEN_UNSEEN_MARK in r[-2] for r in rows):
        lines += ["", CHOSEN_UNSEEN_NOTE + "."]
    lines += [
        "",
        "- **personalized**: the best of every configuration, including those that use who is listening",
        "  (per-listener models, calibration or rescaling, identity as a feature); a model that does not know",
        "  who is listening may be submitted to this track too. CCC per session, mean over each listener's",
        "  stories, then over listeners.",
        "- **generalized**: the best configuration that does not know who is listening; mean over each story's",
        "  listeners, then over stories. On a complete listener x story table both averages are the same number:",
        "  the tracks differ by their models.",
        f"- **unseen listeners ({unseen_selection})**: how well the generalized track predicts a person it has",
        f"  never seen: {UNSEEN_BULLETS.get(unseen_selection, '')}.",
        "- **chance**: 95th percentile of the protocol mean when each session's labels are scored against a",
        "  prediction at that session's own prediction level and scale but the time course of another story's",
        "  block of predictions, the block shifted as a whole by one lag of at least 10 s (1,000 draws): what",
        "  the predictions share across a story's listeners stays in the null. A CCC below it cannot be told",
        "  from chance. A constant (dummy) prediction has CCC 0 by construction: a baseline, not the chance level.",
    ]
    if FUSED_SET in set(df.feature_set):
        lines += [
            "- **late fusion**: each member feature set's configuration chosen for the track, blended by weights",
            "  fitted on the training stories' out-of-fold predictions (validation and test labels never reach",
            "  the blend); early fusion is the set that lists both roles' channels (`both`). Its track follows its",
            "  members: personalized if one of them uses who is listening. No unseen-listener score (not refitted",
            "  without each listener).",
        ]
    if pairs is not None and not pairs.empty:
        lines += [
            "",
            "## Paired comparisons",
            "",
            "On test only. Mean over listeners of each listener's mean CCC difference (first minus second),",
            "[95 % skewness-corrected t interval over listeners], a two-sided sign-flip permutation p-value",
            "that flips each listener's difference, Holm's adjustment over the whole table (the family), and",
            "the smallest p the test can give with that many listeners (2 / 2^listeners): a p at that floor",
            "is the strongest evidence the split can hold, however large the difference.",
            "",
        ]
        lines += markdown.table(
            [
                "comparison",
                "track",
                "split",
                "mean difference [95 % interval]",
                "p",
                "Holm p",
                "smallest p",
                "sessions",
                "listeners",
            ],
            (
                [
                    r.comparison,
                    r.track,
                    r.split,
                    cell(r.mean_diff, r.ci_low, r.ci_high),
                    f"{r.p_value:.3f}",
                    f"{r.p_holm:.3f}",
                    f"{r.p_min:.3f}",
                    r.n_sessions,
                    r.n_listeners,
                ]
                for r in pairs.itertuples()
            ),
        )
    lines += ["", "## Chosen configurations", ""]
    for fs, part in df.groupby("feature_set", sort=False):
        first = part.iloc[0]
        for track in ("personalized", "generalized"):
            run = first[f"run_id_{track}"]
            if run:
                own = first.get(f"config_track_{track}", track)
                known = isinstance(own, str) and own in ("personalized", "generalized")
                note = f", a {own} configuration" if known and own != track else ""
                causal = {"true": ", causal", "false": ", reads future frames"}.get(
                    str(first.get(f"causal_{track}", "")), ""
                )
                lines.append(
                    f"- **{fs!s}**, {track}: {first[f'label_{track}']} (run `{run}`{note}{causal})"
                )
    lines += [
        "",
        "## Reference: published results (real OMG-Empathy test set)",
        "",
        "Barros et al., *The OMG-Empathy Dataset*, ACII 2019, Table IV: VGG16-LSTM + SoundNet baseline, SVM fusion.",
        "Measured on the real corpus; not comparable with numbers from the demo or synthetic corpus.",
        "",
    ]
    lines += markdown.table(
        ["features", "personalized", "generalized"],
        ([fs, f"{p:.2f}", f"{g:.2f}"] for fs, (p, g) in PAPER_TEST_CCC.items()),
    )
    lines += [
        "",
        "A challenge entry, Tan et al. 2018 (arXiv:1812.04891), reached 0.14 / 0.14 on the same test set.",
    ]
    return "\n".join(lines) + "\n"
