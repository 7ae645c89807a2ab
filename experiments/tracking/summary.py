"""Choosing each track's best configuration (:func:`best_per_track`), and the summary a sweep's
parent run carries (:func:`summarise`: tags, ``summary.md``, ``summary.csv``, ``tracks.csv``).
How the tracks choose and what is reported: docs/results.md, "Two averages, two tracks".

>>> import pandas as pd
>>> table = pd.DataFrame({"status": ["done", "done"], "track": ["generalized", "generalized"],
...                       "val.ccc_generalized": [0.2, 0.4], "run_id": ["a", "b"], "label": ["x", "y"]})
>>> best_per_track(table, "val")["generalized"].run_id
'b'
"""

from __future__ import annotations

import tempfile
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

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
    """Each track's best finished configuration of ``table`` (rows with a ``track`` column) by
    the track's own selection metric, the first row winning a tie; tracks without a scored row
    are left out. The tracks nest (the personalized track chooses among every configuration); a
    row keeps its own ``track``. Only the grid's configurations compete; the generalized
    track's choice is returned as its unseen-listener twin when there is one (a row whose
    ``unseen_of`` is its config hash: the same scores, plus its ``*_unseen`` metrics)."""
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
#: the splits that choose a configuration: their numbers are maxima over the grid, no interval
_SELECTION_SPLITS = ("val", "loso", "cv")
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
    """One row per track: its best configuration (``config_track``: the track of its model) with
    each split's CCC under the track's averaging, the chance level (95th percentile) and, on the
    splits that did not choose it, its 95 % interval over listeners. The generalized track's
    ``test_unseen.*`` numbers follow ``unseen_selection`` (:data:`UNSEEN_NOTES`): ``nested``
    takes the mean over listeners of ``nested``'s rows (one per left-out listener,
    :func:`experiments.studies.unseen.nested_unseen`; no interval nor chance level), ``chosen``
    the choice's unseen-listener run, ``fixed`` the named configuration's."""
    rows = []
    for track, best in best_per_track(table, protocol).items():
        row: dict[str, object] = {
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
                best = pd.concat(
                    [best, source[[c for c in source.index if str(c).startswith("test_unseen.")]]]
                )
            if unseen_selection == "nested" and nested is not None and len(nested):
                scores = nested["ccc_test_unseen"].dropna()
                best["test_unseen.ccc_generalized"] = float(scores.mean())
                best["test_unseen.n_listeners"] = float(len(scores))
            row["unseen_selection"] = unseen_selection
            row["unseen_label"] = "" if source is None else str(source.get("label", ""))
        for split in _REPORTED_SPLITS[track]:
            name = f"{split}.ccc_{track}"
            if pd.isna(best.get(name, np.nan)):
                continue
            # the selection split's number is the maximum over the grid: no interval
            ends = (".ci_low", ".ci_high") if split not in _SELECTION_SPLITS else ()
            for key in (name, *(name + e for e in (*ends, ".chance_q95")), f"{split}.n_listeners"):
                if pd.notna(best.get(key, np.nan)):
                    row[key] = float(best[key])
        rows.append(row)
    return pd.DataFrame(rows)


def _missing_interval(row: Mapping[Hashable, Any], split: str) -> str:
    """Why a held-out split's interval is missing: too few listeners, or not logged."""
    n = row.get(f"{split}.n_listeners", np.nan)
    return f"n/a ({int(n)} listener(s); 3 needed)" if isinstance(n, float) and n < 3 else "n/a"


#: how the reports name each CCC averaging (``ccc_averaging`` in the config)
AVERAGING_TEXT = {
    "sessions": "per session, then the mean per listener (personalized) and per story (generalized), "
    "as OMG-Empathy",
    "concatenated": "one CCC over each split's sessions concatenated, as AVEC",
}
SUMMARY_NOTE = (
    "Each track is chosen on validation (or LOSO) under its own averaging and reported once on test:",
    "personalized = mean over listeners of each listener's mean CCC; generalized = mean over stories of",
    "each story's mean CCC. The personalized track chooses among every configuration, the generalized",
    "track among those that do not know who is listening. Intervals: t over listeners, the split's",
    "stories held fixed. `test_unseen`: listeners left out of training (generalized track only),",
    "with the selection named above.",
)


def summary_markdown(summary: pd.DataFrame) -> str:
    """The per-track summary (:func:`track_summary`) as Markdown: value [95 % interval]
    (chance 95th percentile)."""
    lines = ["# Best configuration of each track", ""]
    for row in summary.to_dict("records"):
        lines += _track_section(row)
    return "\n".join([*lines, *SUMMARY_NOTE]) + "\n"


def _track_section(row: Mapping[Hashable, Any]) -> list[str]:
    """One track's section of :func:`summary_markdown`."""
    track = str(row["track"])
    other = row.get("config_track", track) != track
    lines = [
        f"## {track} track",
        "",
        f"- configuration: {row['label']}"
        + (
            f" (a {row['config_track']} configuration: it does not know who is listening)"
            if other
            else ""
        ),
        f"- run: `{row['run_id']}`",
        f"- chosen on: `{row['chosen_on']}`",
        f"- CCC averaging: {AVERAGING_TEXT[str(row['ccc_averaging'])]}",
    ]
    selection = row.get("unseen_selection")
    if isinstance(selection, str) and selection in UNSEEN_NOTES:
        split = str(row["chosen_on"]).split(".")[0]
        note = UNSEEN_NOTES[selection].format(split=split, label=row.get("unseen_label", ""))
        lines.append(f"- unseen listeners (`test_unseen`), selection `{selection}`: {note}")
    cells = [_split_cells(row, split) for split in _REPORTED_SPLITS[track]]
    cells = [c for c in cells if c]
    head = ["split", "CCC", "95 % interval (listeners)", "chance (95th pct.)"]
    marked = any(CHOSEN_UNSEEN_MARK in c[1] for c in cells)
    return [
        *lines,
        "",
        *markdown.table(head, cells),
        "",
        *([CHOSEN_UNSEEN_NOTE + ".", ""] if marked else []),
    ]


def _split_cells(row: Mapping[Hashable, Any], split: str) -> list[str]:
    """A split's row of a track's table: CCC, its interval or why there is none, chance."""
    name = f"{split}.ccc_{row['track']}"
    if pd.isna(row.get(name, np.nan)):
        return []
    low, high = row.get(name + ".ci_low", np.nan), row.get(name + ".ci_high", np.nan)
    selection = row.get("unseen_selection")
    if split in _SELECTION_SPLITS:
        ci = "selection split: none (a maximum over the grid)"
    elif split == "test_unseen" and selection == "nested":
        ci = "none: each listener's own configuration"
    else:
        ci = f"[{low:.3f}, {high:.3f}]" if pd.notna(low) else _missing_interval(row, split)
    mark = f" {CHOSEN_UNSEEN_MARK}" if split == "test_unseen" and selection == "chosen" else ""
    return [split, f"{row[name]:.3f}{mark}", ci, markdown.number(row.get(name + ".chance_q95"))]


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
    head = ["listener", "configuration", "chosen on (without the listener)", "test CCC", "run"]
    lines = [
        "",
        "# Unseen listeners, nested: each left-out listener's configuration",
        "",
        *markdown.table(head, cells),
        "",
        "`experiments export RUN --split test_unseen` writes a run's predictions of its left-out listeners.",
    ]
    return "\n".join(lines) + "\n"


def _tag_tracks(
    summary: pd.DataFrame,
    tags: dict[str, str],
    metrics: dict[str, float],
    prefix: str = "",
    drop_nan: bool = False,
) -> dict[str, str]:
    """Add each track's best run (tags ``<prefix>best_run_id_<track>``, ``..best_label_..``)
    and its reported splits' metrics (``<prefix><metric>``, or ``best_<track>.<metric>``
    without ``prefix``; NaN left out with ``drop_nan``) from ``summary`` (:func:`track_summary`)
    to ``tags`` and ``metrics``; returns track -> best run id."""
    best: dict[str, str] = {}
    for row in summary.to_dict("records"):
        track = row["track"]
        best[track] = row["run_id"]
        tags[f"{prefix}best_run_id_{track}"] = row["run_id"]
        tags[f"{prefix}best_label_{track}"] = str(row["label"])[:5000]
        if isinstance(row.get("unseen_selection"), str):
            tags["unseen_selection"] = row["unseen_selection"]
        splits = tuple(f"{s}." for s in _REPORTED_SPLITS[track])
        start = prefix or f"best_{track}."
        metrics.update(
            {
                f"{start}{k}": v
                for k, v in row.items()
                if str(k).startswith(splits) and not (drop_nan and pd.isna(v))
            }
        )
    return best


def _headline(tags: dict[str, str], best: Mapping[str, str], prefix: str = "") -> None:
    """Tags ``best_run_id`` / ``best_label``: the personalized track's choice (the generalized
    track's without one), one name for the headline run."""
    main = best.get("personalized") or best.get("generalized")
    if main:
        tags["best_run_id"] = main
        label = tags.get(f"{prefix}best_label_generalized", "")
        tags["best_label"] = tags.get(f"{prefix}best_label_personalized", label)


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
    track -> best run id. ``unseen_selection`` and ``nested``: see :func:`track_summary`.
    ``layout``: the store's corpus layout, whose words for the roles summary.md uses
    (:func:`featurestore.storage.roles.in_corpus_words`; ``keep``: the feature-set names)."""
    metrics: dict[str, float] = {"sweep_seconds": seconds, "n_new_runs": n_new}
    tags: dict[str, str] = {}
    summary = track_summary(table, protocol, unseen_selection, nested)
    best_ids = _tag_tracks(summary, tags, metrics)
    _headline(tags, best_ids)
    tracker.log(parent, metrics=metrics, tags=tags or None)
    if not table.empty:
        listing = selection_listing(table, protocol)
        md = summary_markdown(summary) + nested_markdown(nested)
        md = roles_note(layout) + in_corpus_words(md, layout, keep) + "\n"
        md += _listing_markdown(listing[[c for c in _LISTED if c in listing]], protocol, "")
        _log_summary(tracker, parent, md, listing, summary)
    return best_ids


def _listing_markdown(listing: pd.DataFrame, protocol: str, by: str) -> str:
    """The ``Every configuration`` section of summary.md: the selection split's numbers."""
    metrics = f"`{selection_metric('personalized', protocol)}` and `{selection_metric('generalized', protocol)}`"
    return (
        "# Every configuration (selection split only)\n\n"
        + f"{metrics} of every configuration{by}, best first; test numbers only for each track's choice,"
        + " above.\n\n"
        + "\n".join(markdown.frame(listing))
        + "\n"
    )


def _log_summary(
    tracker: Tracker, parent: str, md: str, listing: pd.DataFrame, tracks: pd.DataFrame
) -> None:
    """``summary.csv`` (``listing``), ``summary.md`` and, with rows, ``tracks.csv`` to ``parent``."""
    files: dict[str, bytes | str] = {"summary.csv": listing.to_csv(index=False), "summary.md": md}
    if not tracks.empty:
        files["tracks.csv"] = tracks.to_csv(index=False)
    log_files(tracker, parent, files)


def log_files(
    tracker: Tracker,
    run_id: str,
    files: Mapping[str, bytes | str],
    artifact_path: str | None = None,
) -> None:
    """Log ``files`` (name -> content) to the run ``run_id``, under ``artifact_path``."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in files.items():
            path = Path(tmp) / name
            path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
        tracker.log_artifacts(run_id, tmp, artifact_path)


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
_HELD_OUT = ("test", "test_unseen")


def selection_listing(table: pd.DataFrame, protocol: str) -> pd.DataFrame:
    """Every configuration of ``table`` with its selection-split (validation or LOSO) numbers
    only, best personalized-averaging first: the columns of the held-out splits (``test.*``,
    ``test_unseen.*``) are dropped, and so are intervals (a configuration's number on the split
    it is chosen on is read against the others, not as an estimate)."""
    held_out = tuple(f"{s}." for s in _HELD_OUT)
    keep = [
        c
        for c in table.columns
        if not str(c).startswith(held_out) and not str(c).endswith((".ci_low", ".ci_high"))
    ]
    metric = selection_metric("personalized", protocol)
    out = table[keep]
    return out.sort_values(metric, ascending=False) if metric in out else out


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
        row: dict[str, object] = {
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
    score (:func:`combined_summary`); the parent's metrics, tags and files: docs/outputs.md,
    "Several targets". Returns target -> track -> best run id."""
    metrics: dict[str, float] = {"sweep_seconds": seconds, "n_new_runs": n_new}
    tags: dict[str, str] = {"targets": ",".join(targets)}
    nested = nested or {}
    summaries = {
        t: track_summary(
            table[table["target"] == t] if "target" in table else table.iloc[0:0],
            protocol,
            unseen_selection,
            nested.get(t),
        )
        for t in targets
    }
    # the other track's columns of a row are NaN: not logged
    best_ids = {
        t: _tag_tracks(s, tags, metrics, f"{t}.", drop_nan=True) for t, s in summaries.items()
    }
    combined = combined_summary(summaries)
    for row in combined.to_dict("records"):
        splits = tuple(f"{s}." for s in _REPORTED_SPLITS[row["track"]])
        metrics |= {
            f"combined.{k}": v for k, v in row.items() if str(k).startswith(splits) and pd.notna(v)
        }
    if targets:
        _headline(tags, best_ids.get(targets[0], {}), f"{targets[0]}.")
    tracker.log(parent, metrics=metrics, tags=tags)
    if not table.empty:
        _log_targets_summary(tracker, parent, table, protocol, targets, summaries, combined, nested)
    return best_ids


def _log_targets_summary(
    tracker: Tracker,
    parent: str,
    table: pd.DataFrame,
    protocol: str,
    targets: Sequence[str],
    summaries: dict[str, pd.DataFrame],
    combined: pd.DataFrame,
    nested: dict[str, pd.DataFrame],
) -> None:
    """summary.md (a section per target, the combined score, every configuration by target),
    summary.csv and tracks.csv (each target's rows, then the combined ones) to ``parent``."""
    listing = selection_listing(table, protocol)
    if "target" in listing:  # each target's configurations together, best first
        order = {t: i for i, t in enumerate(targets)}
        listing = listing.sort_values("target", key=lambda c: c.map(order), kind="stable")
    sections = [
        f"# Target `{t}`\n\n"
        + _demoted(summary_markdown(summaries[t]) + nested_markdown(nested.get(t)))
        for t in targets
    ]
    md = "\n".join(sections) + "\n" + combined_markdown(targets, combined) + "\n"
    md += _listing_markdown(
        listing[[c for c in ("target", *_LISTED) if c in listing]], protocol, " by target"
    )
    tracks = pd.concat(
        [s.assign(target=t) for t, s in summaries.items() if len(s)] + [combined], ignore_index=True
    )
    if not tracks.empty:
        tracks = tracks[["target", *[c for c in tracks.columns if c != "target"]]]
    _log_summary(tracker, parent, md, listing, tracks)
