"""Choosing each track's best configuration, and the summary a sweep's parent run carries.

Each challenge track is chosen on validation (or LOSO) under its own averaging
(:func:`experiments.config.tracks.selection_metric`) among the grid's configurations it may
use (:func:`best_per_track`: the personalized track among all, the generalized track among
those that do not know who is listening); :func:`summarise` tags the parent run with each
track's best child and attaches ``summary.md`` / ``summary.csv`` / ``tracks.csv``. Test
numbers appear only for each track's chosen configuration: the per-configuration listing
shows the selection split alone (every run's test CCC stays in MLflow for inspection).

>>> import pandas as pd
>>> table = pd.DataFrame({"status": ["done", "done"], "track": ["generalized", "generalized"],
...                       "val.ccc_generalized": [0.2, 0.4], "run_id": ["a", "b"], "label": ["x", "y"]})
>>> best_per_track(table, "val")["generalized"].run_id
'b'
>>> print(markdown_table(pd.DataFrame({"run": ["a|b"], "ccc": [0.12345]})))
| run | ccc |
|---|---|
| a\\|b | 0.123 |
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from featurestore.storage.roles import in_corpus_words, roles_note

from ..config.grid import Trial
from ..config.options import CHOSEN_UNSEEN_MARK, CHOSEN_UNSEEN_NOTE, TRACKS
from ..config.tracks import candidates, selection_metric
from ..evaluation import markdown
from .child_runs import UNSEEN_OF_TAG
from .tracker import CONFIG_HASH_TAG, Tracker


def best_per_track(table: pd.DataFrame, protocol: str) -> dict[str, pd.Series]:
    """Each track's best finished configuration of ``table`` (rows with a ``track`` column),
    by the track's own selection metric; the first row wins a tie. Tracks without a scored
    row are left out.

    The tracks nest (:func:`experiments.config.tracks.candidates`): the personalized track
    chooses among every configuration, the generalized track among the generalized ones, so a
    global model that wins on validation is both tracks' choice. A row keeps its own
    ``track`` (the track of its model), which may differ from the track that chose it.

    Only the grid's configurations compete; when the generalized track's choice was also
    evaluated on unseen listeners (a row whose ``unseen_of`` is its config hash, see
    :func:`experiments.studies.sweep.run_sweep`), that row is returned: the same configuration
    and scores, plus its ``*_unseen`` metrics (a generalized-track number). The personalized
    track's choice is always the grid's own run.
    """
    out: dict[str, pd.Series] = {}
    if table.empty or "track" not in table:
        return out
    ok = table["status"] != "failed"
    twins = table[ok & table[UNSEEN_OF_TAG].notna()] if UNSEEN_OF_TAG in table else table.iloc[0:0]
    grid = table[ok & ~table.index.isin(twins.index)]
    for track in TRACKS:
        metric = selection_metric(track, protocol)
        part = grid[grid["track"].isin(candidates(track))]
        if metric in part and part[metric].notna().any():
            # the first best, as idxmax gives it (NaN skipped)
            best = part.iloc[int(np.nanargmax(part[metric].to_numpy(dtype=float)))]
            twin = (
                twins[twins[UNSEEN_OF_TAG] == best.get(CONFIG_HASH_TAG)]
                if len(twins) and track == "generalized"
                else twins.iloc[0:0]
            )
            out[track] = twin.iloc[0] if len(twin) else best
    return out


def unseen_listener_trials(
    table: pd.DataFrame, trials: Sequence[Trial], protocol: str
) -> list[Trial]:
    """For each feature set, its chosen generalized-track configuration with the unseen-listener
    protocol on (see :func:`experiments.evaluation.evaluate.evaluate_trials`); none for a set whose choice
    already has its unseen-listener run in ``table``."""
    by_hash = {t.hash(): t for t in trials}
    out: list[Trial] = []
    if table.empty or "features.set" not in table:
        return out
    by = ["target", "features.set"] if "target" in table else "features.set"  # per target too
    for _, part in table.groupby(by, sort=False):
        best = best_per_track(part, protocol).get("generalized")
        if (
            best is None
            or pd.notna(best.get(UNSEEN_OF_TAG, np.nan))
            or best[CONFIG_HASH_TAG] not in by_hash
        ):
            continue
        out.append(replace(by_hash[best[CONFIG_HASH_TAG]], unseen_listener=True))
    return out


#: per track, the splits whose numbers the parent run and the summary report for its best child
_REPORTED_SPLITS = {
    "personalized": ("val", "loso", "cv", "test"),
    "generalized": ("val", "loso", "cv", "test", "test_unseen"),
}
#: ``unseen_selection`` -> what the summary says of its ``test_unseen`` number
UNSEEN_NOTES = {
    "nested": "each left-out listener's configuration chosen on the other listeners' {split} "
    "scores with models fitted without them (nested); mean over listeners of each one's mean "
    "test CCC",
    "chosen": "the generalized choice, made with every listener (the left-out one included: "
    "not nested), refitted without each listener",
    "fixed": "the configuration named in the config before any data ({label}), refitted "
    "without each listener",
}


def _unseen_source(table: pd.DataFrame, best: pd.Series, unseen_selection: str) -> pd.Series | None:
    """The run whose ``test_unseen.*`` numbers the generalized track reports: the chosen
    configuration's (``chosen``), the named configuration's unseen-listener run (``fixed``), or
    none (``nested``: each listener's own choice, :func:`track_summary`)."""
    if unseen_selection == "fixed" and UNSEEN_OF_TAG in table:
        named = table[(table["status"] != "failed") & table[UNSEEN_OF_TAG].notna()]
        return named.iloc[0] if len(named) else None
    return best if unseen_selection == "chosen" else None


def track_summary(
    table: pd.DataFrame,
    protocol: str,
    unseen_selection: str = "nested",
    nested: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per track: its best configuration (chosen on validation or LOSO under the track's own
    averaging; ``config_track`` is the track of its model) with each split's CCC under that
    averaging, the chance level (95th percentile) and, on the splits that did not choose it, its
    95 % interval over listeners (the selection split's number is a maximum over the grid, and
    an interval would pretend it was not).

    The generalized track's ``test_unseen.*`` numbers follow ``unseen_selection``
    (:data:`UNSEEN_NOTES`, column ``unseen_selection``): ``nested`` takes them from ``nested``
    (:func:`experiments.studies.unseen.nested_unseen` over every feature set: one row per
    left-out listener): ``test_unseen.ccc_generalized`` is the mean over listeners of each
    one's test CCC with their own configuration, without interval or chance level (no single
    run made them); ``chosen`` from the generalized choice's unseen-listener run; ``fixed``
    from the named configuration's.
    """
    rows = []
    for track, best in best_per_track(table, protocol).items():
        row = {
            "track": track,
            "run_id": str(best.run_id),
            "label": best.label,
            "config_track": str(best.get("track", track)),
            "chosen_on": selection_metric(track, protocol),
            "ccc_averaging": str(best.get("ccc_averaging", "sessions")),
        }
        if track == "generalized":
            source = _unseen_source(table, best, unseen_selection)
            best = best[[c for c in best.index if not str(c).startswith("test_unseen.")]]
            if source is not None:
                unseen = [c for c in source.index if str(c).startswith("test_unseen.")]
                best = pd.concat([best, source[unseen]])
            if unseen_selection == "nested" and nested is not None and len(nested):
                scores = nested["ccc_test_unseen"].dropna()
                best["test_unseen.ccc_generalized"] = float(scores.mean())
                best["test_unseen.n_listeners"] = float(len(scores))
            row["unseen_selection"] = unseen_selection
            row["unseen_label"] = "" if source is None else str(source.get("label", ""))
        for split in _REPORTED_SPLITS[track]:
            name = f"{split}.ccc_{track}"
            if name in best and pd.notna(best[name]):
                row[name] = float(best[name])
                # the selection split's number is the maximum over the grid: no interval
                selected = split in ("val", "loso", "cv")
                for suffix in (
                    (".chance_q95",) if selected else (".ci_low", ".ci_high", ".chance_q95")
                ):
                    if name + suffix in best and pd.notna(best[name + suffix]):
                        row[name + suffix] = float(best[name + suffix])
                if f"{split}.n_listeners" in best and pd.notna(best[f"{split}.n_listeners"]):
                    row[f"{split}.n_listeners"] = float(best[f"{split}.n_listeners"])
        rows.append(row)
    return pd.DataFrame(rows)


def _number(value: float) -> str:
    """A CCC with 3 decimals, or ``n/a`` (e.g. no chance level for the nested unseen mean)."""
    return "n/a" if pd.isna(value) else f"{value:.3f}"


def _missing_interval(row: dict, split: str) -> str:
    """Why a held-out split's interval is missing: too few listeners, or not logged."""
    n = row.get(f"{split}.n_listeners", np.nan)
    return f"n/a ({int(n)} listener(s); 3 needed)" if pd.notna(n) and n < 3 else "n/a"


#: how the reports name each CCC averaging (``ccc_averaging`` in the config)
AVERAGING_TEXT = {
    "sessions": "per session, then the mean per listener (personalized) and per story (generalized), "
    "as OMG-Empathy",
    "concatenated": "one CCC over each split's sessions concatenated, as AVEC",
}


def summary_markdown(summary: pd.DataFrame) -> str:
    """The per-track summary as Markdown: value [95 % interval] (chance 95th percentile)."""
    lines = ["# Best configuration of each track", ""]
    for row in summary.to_dict("records"):
        lines += [
            f"## {row['track']} track",
            "",
            f"- configuration: {row['label']}"
            + (
                f" (a {row['config_track']} configuration: it does not know who is listening)"
                if row.get("config_track", row["track"]) != row["track"]
                else ""
            ),
            f"- run: `{row['run_id']}`",
            f"- chosen on: `{row['chosen_on']}`",
            f"- CCC averaging: {AVERAGING_TEXT[row['ccc_averaging']]}",
        ]
        selection = row.get("unseen_selection")
        if isinstance(selection, str) and selection in UNSEEN_NOTES:
            note = UNSEEN_NOTES[selection].format(
                split=str(row["chosen_on"]).split(".")[0], label=row.get("unseen_label", "")
            )
            lines.append(f"- unseen listeners (`test_unseen`), selection `{selection}`: {note}")
        lines.append("")
        cells = []
        for split in _REPORTED_SPLITS[row["track"]]:
            name = f"{split}.ccc_{row['track']}"
            if name in row and pd.notna(row[name]):
                low, high = row.get(name + ".ci_low", np.nan), row.get(name + ".ci_high", np.nan)
                ci = (
                    "selection split: none (a maximum over the grid)"
                    if split in ("val", "loso", "cv")
                    else "none: each listener's own configuration"
                    if split == "test_unseen" and row.get("unseen_selection") == "nested"
                    else f"[{low:.3f}, {high:.3f}]"
                    if pd.notna(low)
                    else _missing_interval(row, split)
                )
                marked = split == "test_unseen" and row.get("unseen_selection") == "chosen"
                cells.append(
                    [
                        split,
                        f"{row[name]:.3f}" + (f" {CHOSEN_UNSEEN_MARK}" if marked else ""),
                        ci,
                        _number(row.get(name + ".chance_q95", np.nan)),
                    ]
                )
        lines += [
            *markdown.table(
                ["split", "CCC", "95 % interval (listeners)", "chance (95th pct.)"], cells
            ),
            "",
            *(
                [CHOSEN_UNSEEN_NOTE + ".", ""]
                if any(CHOSEN_UNSEEN_MARK in c[1] for c in cells)
                else []
            ),
        ]
    lines += [
        "Each track is chosen on validation (or LOSO) under its own averaging and reported once on test:",
        "personalized = mean over listeners of each listener's mean CCC; generalized = mean over stories of",
        "each story's mean CCC. The personalized track chooses among every configuration, the generalized",
        "track among those that do not know who is listening. Intervals: t over listeners, the split's",
        "stories held fixed. `test_unseen`: listeners left out of training (generalized track only),",
        "with the selection named above.",
    ]
    return "\n".join(lines) + "\n"


def nested_markdown(nested: pd.DataFrame | None) -> str:
    """The nested unseen-listener choices as Markdown (empty without them): one line per
    left-out listener, its configuration, its selection score and its test CCC."""
    if nested is None or nested.empty:
        return ""
    cells = [
        [
            str(r.listener),
            str(r.label),
            f"`{r.selection_metric}` {r.selection_ccc:.3f}",
            f"{r.ccc_test_unseen:.3f}",
            f"`{r.run_id}`",
        ]
        for r in nested.sort_values("listener").itertuples()
    ]
    lines = [
        "",
        "# Unseen listeners, nested: each left-out listener's configuration",
        "",
        *markdown.table(
            ["listener", "configuration", "chosen on (without the listener)", "test CCC", "run"],
            cells,
        ),
        "",
        "`experiments export RUN --split test_unseen` writes a run's predictions of its left-out listeners.",
    ]
    return "\n".join(lines) + "\n"


def _tag_tracks(
    summary: pd.DataFrame,
    tags: dict[str, str],
    metrics: dict[str, float],
    metric_prefix: str | None = None,
    tag_prefix: str = "",
    drop_nan: bool = False,
) -> dict[str, str]:
    """Add each track's best run (tags ``<tag_prefix>best_run_id_<track>``, ``..best_label_..``)
    and its reported splits' metrics (``<metric_prefix><metric>``, by default
    ``best_<track>.<metric>``; NaN left out with ``drop_nan``) from ``summary``
    (:func:`track_summary`) to ``tags`` and ``metrics``; returns track -> best run id."""
    best: dict[str, str] = {}
    for row in summary.to_dict("records"):
        track = row["track"]
        best[track] = row["run_id"]
        tags[f"{tag_prefix}best_run_id_{track}"] = row["run_id"]
        tags[f"{tag_prefix}best_label_{track}"] = str(row["label"])[:5000]
        if isinstance(row.get("unseen_selection"), str):
            tags["unseen_selection"] = row["unseen_selection"]
        splits = tuple(f"{s}." for s in _REPORTED_SPLITS[track])
        prefix = metric_prefix if metric_prefix is not None else f"best_{track}."
        metrics.update(
            {
                f"{prefix}{k}": v
                for k, v in row.items()
                if str(k).startswith(splits) and not (drop_nan and pd.isna(v))
            }
        )
    return best


def summarise(
    tracker: Tracker,
    parent: str,
    table: pd.DataFrame,
    protocol: str,
    seconds: float,
    n_new: int,
    unseen_selection: str = "nested",
    nested: pd.DataFrame | None = None,
    layout: str = "omg",
    keep: Sequence[str] = (),
) -> dict[str, str]:
    """Tag the parent with the best child of each track and attach the summary tables; returns
    track -> best run id. ``unseen_selection`` and ``nested``: see :func:`track_summary`
    (tag ``unseen_selection``; metric ``best_generalized.test_unseen.ccc_generalized``).
    ``layout``: the store's corpus layout, whose words for the roles summary.md names
    (:func:`featurestore.storage.roles.in_corpus_words`; ``keep``: words left as written, the
    feature-set names)."""
    metrics: dict[str, float] = {"sweep_seconds": seconds, "n_new_runs": n_new}
    tags: dict[str, str] = {}
    summary = track_summary(table, protocol, unseen_selection, nested)
    best_ids = _tag_tracks(summary, tags, metrics)
    main = best_ids.get("personalized") or best_ids.get("generalized")
    if main:
        # one name for the headline run, as before tracks existed: the personalized track's
        tags["best_run_id"] = main
        tags["best_label"] = tags.get(
            "best_label_personalized", tags.get("best_label_generalized", "")
        )
    tracker.log(parent, metrics=metrics, tags=tags or None)
    if not table.empty:
        metric = selection_metric("personalized", protocol)
        listing = selection_listing(table, protocol)
        with tempfile.TemporaryDirectory() as tmp:
            listing.to_csv(Path(tmp) / "summary.csv", index=False)
            (Path(tmp) / "summary.md").write_text(
                roles_note(layout)
                + in_corpus_words(summary_markdown(summary) + nested_markdown(nested), layout, keep)
                + "\n# Every configuration (selection split only)\n\n"
                + f"`{metric}` and `{selection_metric('generalized', protocol)}` of every configuration,"
                + " best first; test numbers only for each track's choice, above.\n\n"
                + markdown_table(listing[[c for c in _LISTED if c in listing]])
                + "\n"
            )
            if not summary.empty:
                summary.to_csv(Path(tmp) / "tracks.csv", index=False)
            tracker.log_artifacts(parent, tmp)
    return best_ids


#: the columns of the per-configuration listing in summary.md (summary.csv has every column
#: of the selection split)
_LISTED = (
    "run_id",
    "status",
    "track",
    "label",
    "val.ccc_personalized",
    "val.ccc_generalized",
    "loso.ccc_personalized",
    "loso.ccc_generalized",
    "cv.ccc_personalized",
    "cv.ccc_generalized",
)
#: splits that did not choose a configuration: their numbers stay out of the per-configuration listing
_HELD_OUT = ("test", "test_unseen", "val_unseen")  # val_unseen: runs of earlier releases


def selection_listing(table: pd.DataFrame, protocol: str) -> pd.DataFrame:
    """Every configuration of ``table`` with its selection-split (validation or LOSO) numbers
    only, best personalized-averaging first: the columns of the held-out splits (``test.*``,
    ``test_unseen.*``, ``val_unseen.*``) are dropped, and so are intervals (a configuration's
    number on the split it is chosen on is read against the others, not as an estimate)."""
    held_out = tuple(f"{s}." for s in _HELD_OUT)
    keep = [
        c
        for c in table.columns
        if not str(c).startswith(held_out) and not str(c).endswith((".ci_low", ".ci_high"))
    ]
    metric = selection_metric("personalized", protocol)
    out = table[keep]
    return out.sort_values(metric, ascending=False) if metric in out else out


def markdown_table(table: pd.DataFrame) -> str:
    """``table`` as a Markdown table (text cells as they are, numbers with 3 decimals)."""

    def cell(v) -> str:
        if isinstance(v, float):
            return "" if pd.isna(v) else f"{v:.3f}"
        return str(v)

    return "\n".join(
        markdown.table(
            list(table.columns), ([cell(v) for v in row] for row in table.itertuples(index=False))
        )
    )


# ---------------------------------------------------------------- several targets
def combined_summary(summaries: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per track (``target`` ``combined``): for each reported split, the mean over
    targets of each target's chosen configuration's CCC (each target chosen on its own
    validation or LOSO scores, as in :func:`track_summary`). A track, or a split, is left out
    unless every target has it: a mean over some targets would not be comparable."""
    rows = []
    for track in TRACKS:
        parts = [s[s["track"] == track] for s in summaries.values() if "track" in s]
        chosen = [c.iloc[0] for c in parts if len(c)]
        if not summaries or len(chosen) < len(summaries):
            continue
        row: dict = {
            "target": "combined",
            "track": track,
            "n_targets": len(chosen),
            "chosen_on": str(chosen[0]["chosen_on"]),
            "ccc_averaging": str(chosen[0]["ccc_averaging"]),
        }
        for split in _REPORTED_SPLITS[track]:
            name = f"{split}.ccc_{track}"
            values = [float(c.get(name, np.nan)) for c in chosen]
            if all(np.isfinite(values)):
                row[name] = float(np.mean(values))
        if "test_unseen.ccc_generalized" in row:  # every target's selection is the config's
            row["unseen_selection"] = chosen[0].get("unseen_selection")
        rows.append(row)
    return pd.DataFrame(rows)


def combined_markdown(targets: Sequence[str], combined: pd.DataFrame) -> str:
    """The combined score as Markdown: per track and split, the mean over targets."""
    cells = []
    for row in combined.to_dict("records"):
        for split in _REPORTED_SPLITS[row["track"]]:
            name = f"{split}.ccc_{row['track']}"
            if name in row and pd.notna(row[name]):
                marked = split == "test_unseen" and row.get("unseen_selection") == "chosen"
                mark = f" {CHOSEN_UNSEEN_MARK}" if marked else ""
                cells.append([row["track"], split, f"{row[name]:.3f}{mark}"])
    lines = [
        "# Combined over targets",
        "",
        f"Targets: {', '.join(f'`{t}`' for t in targets)}. For each track and split, the mean over",
        "targets of each target's chosen configuration's CCC (each chosen on its own validation or LOSO",
        "scores); a track or split is left out unless every target has it.",
        "",
        *markdown.table(["track", "split", "mean CCC over targets"], cells),
        "",
        *([CHOSEN_UNSEEN_NOTE + ".", ""] if any(CHOSEN_UNSEEN_MARK in c[2] for c in cells) else []),
    ]
    return "\n".join(lines)


def _demoted(text: str) -> str:
    """Markdown ``text`` with each heading one level down (a section inside a target's)."""
    return "\n".join("#" + line if line.startswith("#") else line for line in text.split("\n"))


def summarise_targets(
    tracker: Tracker,
    parent: str,
    table: pd.DataFrame,
    protocol: str,
    targets: Sequence[str],
    seconds: float,
    n_new: int,
    unseen_selection: str = "nested",
    nested: dict[str, pd.DataFrame] | None = None,
) -> dict[str, dict[str, str]]:
    """:func:`summarise` for a sweep of several ``targets`` (``table`` has a ``target`` column):
    each target's tracks chosen and reported as :func:`track_summary` does, plus the combined
    score (:func:`combined_summary`).

    The parent run gets metrics ``<target>.<split>.ccc_<track>`` (and their ``.ci_low``,
    ``.ci_high``, ``.chance_q95``) per target and ``combined.<split>.ccc_<track>``, tags
    ``<target>.best_run_id_<track>`` and ``<target>.best_label_<track>``, and ``best_run_id`` /
    ``best_label`` naming the first target's headline run; artifacts ``summary.md`` (a section
    per target, the combined score, every configuration), ``summary.csv`` (every configuration,
    selection split only) and ``tracks.csv`` (one row per target and track, then the combined
    rows). Returns target -> track -> best run id.
    """
    metrics: dict[str, float] = {"sweep_seconds": seconds, "n_new_runs": n_new}
    tags: dict[str, str] = {"targets": ",".join(targets)}
    summaries: dict[str, pd.DataFrame] = {}
    best_ids: dict[str, dict[str, str]] = {}
    for target in targets:
        part = table[table["target"] == target] if "target" in table else table.iloc[0:0]
        summary = track_summary(part, protocol, unseen_selection, (nested or {}).get(target))
        summaries[target] = summary
        # the other track's columns of a row are NaN: not logged
        best_ids[target] = _tag_tracks(
            summary, tags, metrics, f"{target}.", f"{target}.", drop_nan=True
        )
    combined = combined_summary(summaries)
    for row in combined.to_dict("records"):
        metrics.update(
            {
                f"combined.{k}": v
                for k, v in row.items()
                if str(k).startswith(tuple(f"{s}." for s in _REPORTED_SPLITS[row["track"]]))
                and pd.notna(v)
            }
        )
    first = best_ids.get(targets[0], {}) if targets else {}
    main = first.get("personalized") or first.get("generalized")
    if main:
        tags["best_run_id"] = main
        tags["best_label"] = tags.get(
            f"{targets[0]}.best_label_personalized",
            tags.get(f"{targets[0]}.best_label_generalized", ""),
        )
    tracker.log(parent, metrics=metrics, tags=tags)
    if not table.empty:
        listing = selection_listing(table, protocol)
        if "target" in listing:  # each target's configurations together, best first
            order = {t: i for i, t in enumerate(targets)}
            listing = listing.sort_values("target", key=lambda c: c.map(order), kind="stable")
        sections = [
            f"# Target `{t}`\n\n"
            + _demoted(summary_markdown(summaries[t]) + nested_markdown((nested or {}).get(t)))
            for t in targets
        ]
        metric = selection_metric("personalized", protocol)
        columns = [c for c in ("target", *_LISTED) if c in listing]
        tracks = pd.concat(
            [s.assign(target=t) for t, s in summaries.items() if len(s)] + [combined],
            ignore_index=True,
        )
        with tempfile.TemporaryDirectory() as tmp:
            listing.to_csv(Path(tmp) / "summary.csv", index=False)
            (Path(tmp) / "summary.md").write_text(
                "\n".join(sections)
                + "\n"
                + combined_markdown(targets, combined)
                + "\n# Every configuration (selection split only)\n\n"
                + f"`{metric}` and `{selection_metric('generalized', protocol)}` of every configuration"
                + " by target, best first; test numbers only for each track's choice, above.\n\n"
                + markdown_table(listing[columns])
                + "\n"
            )
            if not tracks.empty:
                tracks[["target", *[c for c in tracks.columns if c != "target"]]].to_csv(
                    Path(tmp) / "tracks.csv", index=False
                )
            tracker.log_artifacts(parent, tmp)
    return best_ids
