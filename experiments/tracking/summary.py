"""Each track's best configuration (:func:`best_per_track`) and the summary a sweep's parent run carries
(:func:`summarise`). How the tracks choose: docs/results.md, "Two averages, two tracks"."""

from __future__ import annotations

import tempfile
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from featurestore.storage.layouts import DEFAULT_LAYOUT, CorpusLayout

from ..config.grid import Trial
from ..config.metrics import DEFAULT_METRIC, MetricSpec, get_metric
from ..config.options import CHOSEN_UNSEEN_MARK, CHOSEN_UNSEEN_NOTE, CONSTANT_MARK, TRACKS
from ..config.tracks import candidates, selection_metric
from ..evaluation import markdown
from .child_runs import UNSEEN_OF_TAG
from .tracker import CONFIG_HASH_TAG, Tracker

Row = Mapping[Hashable, Any]


def constant_marked(table: pd.DataFrame) -> pd.Series:
    """Per row of a sweep table: whether it is marked ``<split>.constant_predictions``."""
    marks = [c for c in table if str(c).endswith(f".{CONSTANT_MARK}")]
    return (table[marks] == 1).any(axis=1)


def best_per_track(
    table: pd.DataFrame, protocol: str, metric: str = DEFAULT_METRIC
) -> dict[str, pd.Series]:
    """Each track's best finished grid configuration by its selection metric (the generalized one's
    unseen twin); one marked ``<split>.constant_predictions`` is never chosen."""
    out: dict[str, pd.Series] = {}
    if table.empty or "track" not in table:
        return out
    ok = (table["status"] != "failed") & ~constant_marked(table)
    twins = table[ok & table[UNSEEN_OF_TAG].notna()] if UNSEEN_OF_TAG in table else table.iloc[0:0]
    grid = table[ok & ~table.index.isin(twins.index)]
    for track in TRACKS:
        name = selection_metric(track, protocol, metric)
        part = grid[grid["track"].isin(candidates(track))]
        if name in part and part[name].notna().any():
            best = part.iloc[get_metric(metric).best_index(part[name].to_numpy(dtype=float))]
            if len(twins) and track == "generalized":
                twin = twins[twins[UNSEEN_OF_TAG] == best.get(CONFIG_HASH_TAG)]
                best = twin.iloc[0] if len(twin) else best
            out[track] = best
    return out


def unseen_listener_trials(
    table: pd.DataFrame, trials: Sequence[Trial], protocol: str, metric: str = DEFAULT_METRIC
) -> list[Trial]:
    """Each feature set's generalized choice with the unseen-listener protocol on, unless already run."""
    by_hash = {t.hash(): t for t in trials}
    if table.empty or "features.set" not in table:
        return []
    out: list[Trial] = []
    by = ["target", "features.set"] if "target" in table else "features.set"
    for _, part in table.groupby(by, sort=False):
        best = best_per_track(part, protocol, metric).get("generalized")
        if best is not None and pd.isna(best.get(UNSEEN_OF_TAG, np.nan)):
            if best[CONFIG_HASH_TAG] in by_hash:
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
    "test {metric}",
    "chosen": "the generalized choice, made with every listener (the left-out one included: "
    "not nested), refitted without each listener",
    "fixed": "the configuration named in the config before any data ({label}), refitted "
    "without each listener",
}


def _metric_of(row: Mapping[Any, Any]) -> MetricSpec:
    """The metric a :func:`track_summary` row was chosen by (its ``chosen_on`` names it)."""
    return get_metric(str(row["chosen_on"]).split(".", 1)[1].removesuffix(f"_{row['track']}"))


def _with_unseen(
    table: pd.DataFrame,
    best: pd.Series,
    row: dict[str, object],
    unseen_selection: str,
    nested: pd.DataFrame | None,
    m: MetricSpec,
) -> pd.Series:
    """The generalized choice with the ``test_unseen.*`` numbers of ``unseen_selection`` (:data:`UNSEEN_NOTES`)."""
    # the run whose test_unseen numbers are reported: the choice's, the named configuration's, none
    source = best if unseen_selection == "chosen" else None
    if unseen_selection == "fixed" and UNSEEN_OF_TAG in table:
        named = table[(table["status"] != "failed") & table[UNSEEN_OF_TAG].notna()]
        source = named.iloc[0] if len(named) else None
    best = best[[c for c in best.index if not str(c).startswith("test_unseen.")]]
    if source is not None:
        best = pd.concat(
            [best, source[[c for c in source.index if str(c).startswith("test_unseen.")]]]
        )
    if unseen_selection == "nested" and nested is not None and len(nested):
        scores = nested[m.column("test_unseen")].dropna()
        best[m.key("test_unseen", "generalized")] = float(scores.mean())
        best["test_unseen.n_listeners"] = float(len(scores))
    row["unseen_selection"] = unseen_selection
    row["unseen_label"] = "" if source is None else str(source.get("label", ""))
    return best


def track_summary(
    table: pd.DataFrame,
    protocol: str,
    unseen_selection: str = "nested",
    nested: pd.DataFrame | None = None,
    metric: str = DEFAULT_METRIC,
) -> pd.DataFrame:
    """One row per track (the columns of ``tracks.csv``, docs/design.md#reports): its best configuration with
    each split's ``metric``, chance level and interval; ``test_unseen.*`` follow ``unseen_selection``."""
    m, rows = get_metric(metric), []
    for track, best in best_per_track(table, protocol, metric).items():
        row: dict[str, object] = {
            "track": track,
            "run_id": str(best.run_id),
            "label": best.label,
            "config_track": str(best.get("track", track)),
            "chosen_on": selection_metric(track, protocol, metric),
            m.column("averaging"): str(best.get(m.column("averaging"), m.averaging)),
        }
        if track == "generalized":
            best = _with_unseen(table, best, row, unseen_selection, nested, m)
        for split in _REPORTED_SPLITS[track]:
            name = m.key(split, track)
            if pd.isna(best.get(name, np.nan)):
                continue
            # the selection split's number is the maximum over the grid: no interval
            ends = (".ci_low", ".ci_high") if split not in _SELECTION_SPLITS else ()
            keys = (name, *(name + e for e in (*ends, ".chance_q95")), f"{split}.n_listeners")
            # a metric without intervals or chance level logs none: the summary says why
            row |= {k: float(best[k]) for k in keys if pd.notna(best.get(k, np.nan))}
        rows.append(row)
    return pd.DataFrame(rows)


#: how the reports name each averaging (``averaging`` in the config); ``{metric}``: its title
AVERAGING_TEXT = {
    "sessions": "per session, then the mean per listener (personalized) and per story (generalized), "
    "as OMG-Empathy",
    "concatenated": "one {metric} over each split's sessions concatenated, as AVEC",
}
SUMMARY_NOTE = (
    "Each track is chosen on validation (or LOSO) under its own averaging and reported once on test:",
    "personalized = mean over listeners of each listener's mean {metric}; generalized = mean over stories of",
    "each story's mean {metric}. The personalized track chooses among every configuration, the generalized",
    "track among those that do not know who is listening. Intervals: t over listeners, the split's",
    "stories held fixed. `test_unseen`: listeners left out of training (generalized track only),",
    "with the selection named above.",
)


#: :data:`SUMMARY_NOTE` of a sweep whose metric is one value over each split's sessions joined
CONCATENATED_NOTE = (
    "Each track is chosen on validation (or LOSO) and reported once on test by one {metric} over each",
    "split's sessions concatenated (`averaging: concatenated`, as AVEC), the same averaging for",
    "both tracks: they differ by their models. The personalized track chooses among every",
    "configuration, the generalized track among those that do not know who is listening. No",
    "interval or chance level (those are over listeners' per-session {metric}s). `test_unseen`:",
    "listeners left out of training (generalized track only), with the selection named above.",
)


def summary_markdown(summary: pd.DataFrame) -> str:
    """:func:`track_summary` as Markdown, closed by :data:`SUMMARY_NOTE` (or :data:`CONCATENATED_NOTE`)."""
    lines, averagings, title = ["# Best configuration of each track", ""], set(), ""
    lacks: dict[str, None] = {}
    for row in summary.to_dict("records"):
        lines += _track_section(row)
        m = _metric_of(row)
        averagings.add(str(row[m.column("averaging")]))
        title = m.title
        lacks |= dict.fromkeys(m.lacks())
    note = CONCATENATED_NOTE if averagings == {"concatenated"} else SUMMARY_NOTE
    words = [line.format(metric=title) for line in note]
    return "\n".join([*lines, *words, *(f"Note: {t}." for t in lacks)]) + "\n"


def _track_section(row: Row) -> list[str]:
    """One track's section of :func:`summary_markdown`."""
    track, m = str(row["track"]), _metric_of(row)
    own = row.get("config_track", track)
    own = f" (a {own} configuration: it does not know who is listening)" if own != track else ""
    lines = [
        f"## {track} track",
        "",
        f"- configuration: {row['label']}{own}",
        f"- run: `{row['run_id']}`",
        f"- chosen on: `{row['chosen_on']}`",
        f"- {m.title} averaging: "
        + AVERAGING_TEXT[str(row[m.column("averaging")])].format(metric=m.title),
    ]
    selection = row.get("unseen_selection")
    if isinstance(selection, str) and selection in UNSEEN_NOTES:
        split = str(row["chosen_on"]).split(".")[0]
        label = row.get("unseen_label", "")
        how = UNSEEN_NOTES[selection].format(split=split, label=label, metric=m.title)
        lines.append(f"- unseen listeners (`test_unseen`), selection `{selection}`: {how}")
    cells = [c for split in _REPORTED_SPLITS[track] if (c := _split_cells(row, split, m))]
    head = ["split", m.title, "95 % interval (listeners)", "chance (95th pct.)"]
    marked = any(CHOSEN_UNSEEN_MARK in c[1] for c in cells)
    note = [CHOSEN_UNSEEN_NOTE + ".", ""] if marked else []
    return [*lines, "", *markdown.table(head, cells), "", *note]


def _split_cells(row: Row, split: str, m: MetricSpec) -> list[str]:
    """A split's row of a track's table: the value, its interval or why there is none, chance."""
    name = m.key(split, str(row["track"]))
    if pd.isna(row.get(name, np.nan)):
        return []
    low, high = row.get(name + ".ci_low", np.nan), row.get(name + ".ci_high", np.nan)
    selection = row.get("unseen_selection")
    n = row.get(f"{split}.n_listeners", np.nan)
    if split in _SELECTION_SPLITS:
        ci = "selection split: none (a maximum over the grid)"
    elif split == "test_unseen" and selection == "nested":
        ci = "none: each listener's own configuration"
    elif pd.notna(low):
        ci = f"[{low:.3f}, {high:.3f}]"
    else:
        few = isinstance(n, float) and n < 3
        ci = f"n/a ({int(n)} listener(s); 3 needed)" if few else "n/a"
    mark = f" {CHOSEN_UNSEEN_MARK}" if split == "test_unseen" and selection == "chosen" else ""
    return [split, f"{row[name]:.3f}{mark}", ci, markdown.number(row.get(name + ".chance_q95"))]


def nested_markdown(
    nested: pd.DataFrame | None,
    persons: Mapping[int, str] | None = None,
    metric: str = DEFAULT_METRIC,
) -> str:
    """The nested unseen-listener choices as Markdown (``persons``: listener number -> the manifest's id)."""
    if nested is None or nested.empty:
        return ""
    m = get_metric(metric)
    ids = {str(n): p for n, p in (persons or {}).items()}
    cells = [
        [
            ids.get(str(r["listener"]), str(r["listener"])),
            str(r["label"]),
            f"`{r['selection_metric']}` {r[f'selection_{m.name}']:.3f}",
            f"{r[m.column('test_unseen')]:.3f}",
            f"`{r['run_id']}`",
        ]
        for r in nested.sort_values("listener").to_dict("records")
    ]
    head = [
        "listener",
        "configuration",
        "chosen on (without the listener)",
        f"test {m.title}",
        "run",
    ]
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
    """Add each track's best run and its splits' metrics to ``tags`` and ``metrics``; track -> run id."""
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
        metrics |= {
            f"{start}{k}": v
            for k, v in row.items()
            if str(k).startswith(splits) and not (drop_nan and pd.isna(v))
        }
    return best


def _headline(tags: dict[str, str], best: Mapping[str, str], prefix: str = "") -> None:
    """Tags ``best_run_id`` / ``best_label``: the personalized choice, else the generalized."""
    if main := best.get("personalized") or best.get("generalized"):
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
    layout: CorpusLayout = DEFAULT_LAYOUT,
    keep: Sequence[str] = (),
    metric: str = DEFAULT_METRIC,
    note: str | None = None,
    persons: Mapping[int, str] | None = None,
) -> dict[str, str]:
    """Tag the parent with each track's best child, attach the summary tables in ``layout``'s words; track -> run id."""
    metrics: dict[str, float] = {"sweep_seconds": seconds, "n_new_runs": n_new}
    tags: dict[str, str] = {}
    summary = track_summary(table, protocol, unseen_selection, nested, metric)
    best_ids = _tag_tracks(summary, tags, metrics)
    _headline(tags, best_ids)
    tracker.log(parent, metrics=metrics, tags=tags or None)
    if not table.empty:
        listing = selection_listing(table, protocol, metric)
        md = summary_markdown(summary) + nested_markdown(nested, persons, metric)
        md = _in_corpus_words(md, layout, keep, note) + "\n"
        md += _listing_markdown(listing, protocol, metric)
        _log_summary(tracker, parent, md, listing, summary)
    return best_ids


def _in_corpus_words(md: str, layout: CorpusLayout, keep: Sequence[str], note: str | None) -> str:
    """``md`` in the corpus's words, after ``note`` (None: the layout's)."""
    return (layout.note() if note is None else note) + layout.in_words(md, keep)


def _listing_markdown(listing: pd.DataFrame, protocol: str, metric: str, by: str = "") -> str:
    """The ``Every configuration`` section of summary.md: the selection split's numbers."""
    m = get_metric(metric)
    listed = ["target"] if by else []
    listed += ["run_id", "status", "track", "label"]
    listed += [m.key(s, t) for s in _SELECTION_SPLITS for t in TRACKS]
    names = " and ".join(f"`{selection_metric(t, protocol, metric)}`" for t in TRACKS)
    return (
        "# Every configuration (selection split only)\n\n"
        + f"{names} of every configuration{by}, best first; test numbers only for each track's choice,"
        + " above.\n\n"
        + "\n".join(markdown.frame(listing[[c for c in listed if c in listing]]))
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


def selection_listing(
    table: pd.DataFrame, protocol: str, metric: str = DEFAULT_METRIC
) -> pd.DataFrame:
    """Every configuration with its selection-split numbers only, best personalized value first."""
    keep = [
        c
        for c in table.columns
        if not str(c).startswith(("test.", "test_unseen."))
        and not str(c).endswith((".ci_low", ".ci_high"))
    ]
    name, out = selection_metric("personalized", protocol, metric), table[keep]
    if name not in out:
        return out
    return out.sort_values(name, ascending=not get_metric(metric).higher_is_better)


def combined_summary(summaries: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per track: per reported split, the mean over targets of each one's choice (all targets needed)."""
    rows = []
    for track in TRACKS:
        parts = [s[s["track"] == track] for s in summaries.values() if "track" in s]
        chosen = [c.iloc[0] for c in parts if len(c)]
        if not summaries or len(chosen) < len(summaries):
            continue
        row: dict[str, Any] = {"target": "combined", "track": track, "n_targets": len(chosen)}
        row["chosen_on"] = str(chosen[0]["chosen_on"])
        m = _metric_of(row)
        row[m.column("averaging")] = str(chosen[0][m.column("averaging")])
        for split in _REPORTED_SPLITS[track]:
            values = [float(c.get(m.key(split, track), np.nan)) for c in chosen]
            if all(np.isfinite(values)):
                row[m.key(split, track)] = float(np.mean(values))
        if m.key("test_unseen", "generalized") in row:  # every target's selection is the config's
            row["unseen_selection"] = chosen[0].get("unseen_selection")
        rows.append(row)
    return pd.DataFrame(rows)


def combined_markdown(targets: Sequence[str], combined: pd.DataFrame) -> str:
    """The combined score as Markdown: per track and split, the mean over targets."""
    cells, title = [], get_metric(DEFAULT_METRIC).title
    for row in combined.to_dict("records"):
        m = _metric_of(row)
        title = m.title
        for split in _REPORTED_SPLITS[row["track"]]:
            name = m.key(split, row["track"])
            if name in row and pd.notna(row[name]):
                marked = split == "test_unseen" and row.get("unseen_selection") == "chosen"
                mark = f" {CHOSEN_UNSEEN_MARK}" if marked else ""
                cells.append([row["track"], split, f"{row[name]:.3f}{mark}"])
    lines = [
        "# Combined over targets",
        "",
        f"Targets: {', '.join(f'`{t}`' for t in targets)}. For each track and split, the mean over",
        f"targets of each target's chosen configuration's {title} (each chosen on its own validation or LOSO",
        "scores); a track or split is left out unless every target has it.",
        "",
        *markdown.table(["track", "split", f"mean {title} over targets"], cells),
        "",
        *([CHOSEN_UNSEEN_NOTE + ".", ""] if any(CHOSEN_UNSEEN_MARK in c[2] for c in cells) else []),
    ]
    return "\n".join(lines)


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
    metric: str = DEFAULT_METRIC,
    layout: CorpusLayout = DEFAULT_LAYOUT,
    keep: Sequence[str] = (),
    note: str | None = None,
    persons: Mapping[int, str] | None = None,
) -> dict[str, dict[str, str]]:
    """:func:`summarise` for several ``targets`` (docs/outputs.md, "Several targets"); target -> track -> run id."""
    metrics: dict[str, float] = {"sweep_seconds": seconds, "n_new_runs": n_new}
    tags: dict[str, str] = {"targets": ",".join(targets)}
    nested = nested or {}
    parts = {
        t: table[table["target"] == t] if "target" in table else table.iloc[0:0] for t in targets
    }
    summaries = {
        t: track_summary(p, protocol, unseen_selection, nested.get(t), metric)
        for t, p in parts.items()
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
        listing = selection_listing(table, protocol, metric)
        if "target" in listing:  # each target's configurations together, best first
            order = {t: i for i, t in enumerate(targets)}
            listing = listing.sort_values("target", key=lambda c: c.map(order), kind="stable")
        text = _targets_markdown(targets, summaries, combined, nested, persons, metric)
        md = _in_corpus_words(text, layout, keep, note)
        md += _listing_markdown(listing, protocol, metric, " by target")
        tracks = pd.concat(
            [s.assign(target=t) for t, s in summaries.items() if len(s)] + [combined],
            ignore_index=True,
        )
        if not tracks.empty:
            tracks = tracks[["target", *[c for c in tracks.columns if c != "target"]]]
        _log_summary(tracker, parent, md, listing, tracks)
    return best_ids


def _targets_markdown(
    targets: Sequence[str],
    summaries: dict[str, pd.DataFrame],
    combined: pd.DataFrame,
    nested: dict[str, pd.DataFrame],
    persons: Mapping[int, str] | None = None,
    metric: str = DEFAULT_METRIC,
) -> str:
    """summary.md's sections of several targets (headings a level down), then the combined score."""
    sections = []
    for t in targets:
        text = summary_markdown(summaries[t]) + nested_markdown(nested.get(t), persons, metric)
        demoted = "\n".join("#" + s if s.startswith("#") else s for s in text.split("\n"))
        sections.append(f"# Target `{t}`\n\n" + demoted)
    return "\n".join(sections) + "\n" + combined_markdown(targets, combined) + "\n"
