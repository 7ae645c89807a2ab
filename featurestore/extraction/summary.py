"""What ``featurestore`` prints after a run; past :data:`SUMMARY_LINES` sessions, lines are
grouped and counted (failures always listed, on stderr)."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..extractors import known_lookahead_s
from ..storage.layouts import DEFAULT_LAYOUT, CorpusLayout, layout_of, table_layout
from ..storage.roles import corpus_key
from .recordings import some

EXIT_OK, EXIT_FAILED = 0, 1


def print_table(rows: list[dict], columns: list[str]) -> None:
    """``rows`` as left-aligned ``columns`` under a header line (nothing for no rows)."""
    if not rows:
        return
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


#: the columns of a session (scanned or stored) that its layout's ids are read from
_ID_FIELDS = ["session", "listener", "story", "speaker", "split", "person", "group", "partner"]


def _with_ids(row: dict, table: CorpusLayout, columns: Mapping[str, str]) -> dict:
    """``row`` with the session's ids under the ``columns`` of the ``table``'s layout."""
    row = row | layout_of(row["layout"]).ids(row)
    return row | {header: row[key] for header, key in columns.items()}


def scan_table(sessions: Sequence[Any], where: str) -> None:
    """``featurestore scan``'s table of ``sessions`` and its count line, in the corpus's words
    (a manifest's ids as written and its media columns; OMG's listener, story, speaker, video)."""
    table = table_layout(s.layout for s in sessions)
    ids = table.id_columns(any(s.partner or s.speaker for s in sessions))
    shared = not table.listed  # one shared video per session, found by name
    media = ["video"] if shared else ["media"]
    extra = ["transcript"] if shared or any(s.transcript for s in sessions) else []
    extra += ["ratings"] if any(s.ratings for s in sessions) else []
    rows = []
    for s in sessions:
        files = (["video"] if s.video else []) + sorted(s.media)
        row = _with_ids({c: getattr(s, c) for c in [*_ID_FIELDS, "layout"]}, table, ids)
        rows.append(
            row
            | {
                "video": s.video.name if s.video else "-",
                "media": ",".join(files) or "-",
                "labels": ",".join(sorted(s.annotations)) or "-",
                "transcript": "yes" if s.transcript else "-",
                "ratings": ",".join(sorted(s.ratings)) or "-",
            }
        )
    print_table(rows, ["session", *ids, "split", *media, "labels", *extra])
    if shared:
        with_video = sum(1 for s in sessions if s.video)
        print(f"\n{len(sessions)} sessions, {with_video} with a shared video in {where}")
    else:
        with_video = sum(
            1 for s in sessions if s.video or any(k.startswith("video") for k in s.media)
        )
        persons = len({r["person"] for r in rows})
        groups = len({r["group"] for r in rows})
        alone = "" if "partner" in ids.values() else f", no {table.words.speaker}"
        print(
            f"\n{len(sessions)} sessions of {persons} person(s) in {groups} group(s){alone}, "
            f"{with_video} with a video, in {where}"
        )
    if blind := [s.session for s in sessions if not s.annotations and not s.ratings]:
        print(f"{len(blind)} session(s) without labels: predict only ({some(blind)})")


def store_table(df: Any) -> None:
    """``featurestore ls``'s table of :meth:`~..storage.store.Store.sessions`, in the corpus's words."""
    table = table_layout(df.layout)
    ids = table.id_columns(any(p for p in df.partner) or any(df.speaker != 0))
    rows = []
    for r in df.to_dict("records"):
        names = layout_of(r["layout"]).role_names
        rows.append(
            _with_ids(r, table, ids)
            | {
                "channels": ",".join(corpus_key(k, names) for k in r["channels"]),
                "targets": ",".join(r["targets"]),
            }
        )
    print_table(rows, ["session", *ids, "split", "n_frames", "channels", "targets"])


#: per-session lines of the extraction summary before it groups them (one screen in all)
SUMMARY_LINES = 12


def print_extract_summary(
    results: Sequence[Any], started: float, layouts: Mapping[str, str] | None = None
) -> int:
    """Counts, computed channels and notes of an extraction (``started``: its perf_counter),
    failures on stderr; the exit code. ``layouts``: session -> its layout, whose words name
    the channels."""
    layouts = layouts or {}
    counts = Counter(r.status for r in results)
    print(
        f"\nextraction summary ({time.perf_counter() - started:.1f} s): "
        f"{counts.get('ok', 0)} extracted, {counts.get('skipped', 0)} already current, {counts.get('failed', 0)} failed"
    )
    computed = [r for r in results if r.computed]
    words = {
        r.session: layout_of(layouts.get(r.session, DEFAULT_LAYOUT.name)).role_names
        for r in computed
    }
    shown = {r.session: [corpus_key(k, words[r.session]) for k in r.computed] for r in computed}
    if len(computed) <= SUMMARY_LINES:
        for r in computed:
            print(f"  {r.session}: computed {', '.join(shown[r.session])} in {r.seconds:.1f} s")
    else:  # many sessions: one line per set of computed channels
        groups: dict[tuple[str, ...], list[str]] = {}
        for r in computed:
            groups.setdefault(tuple(shown[r.session]), []).append(r.session)
        for chans, names in groups.items():
            print(f"  {len(names)} sessions computed {', '.join(chans)} ({some(names, 4)})")
    notes = [f"  {r.session}: note: {n}" for r in results for n in r.notes]
    for line in notes[:SUMMARY_LINES]:
        print(line)
    if len(notes) > SUMMARY_LINES:
        print(f"  ... and {len(notes) - SUMMARY_LINES} more notes")
    failed = [r for r in results if r.failed]
    if failed:
        for r in failed:
            print(f"  FAILED {r.session}: {r.error}", file=sys.stderr)
        print(
            f"{len(failed)} session(s) failed (reasons above); finished sessions are stored: "
            "fix the inputs and re-run the same command to do only what is missing",
            file=sys.stderr,
        )
    return EXIT_FAILED if failed else EXIT_OK


def print_import(report: Any, folder: str, expected: str) -> int:
    """Per-session lines (failures on stderr), then the one-line summary; returns the exit code."""
    ok = report.succeeded
    if len(ok) <= SUMMARY_LINES:
        for r in ok:
            print(r)
    else:  # one screen: the failures matter, the successes are counted
        print(f"ok     {len(ok)} sessions ({some([r.session for r in ok], 4)})")
    for r in report.failed:
        print(r, file=sys.stderr)
    for p in report.skipped:
        print(f"skipped {p}: {report.skip_reason}")
    fix = (
        " (their shards are unchanged; fix the files named above and re-run)"
        if report.failed
        else ""
    )
    print(f"{report.what}: {len(ok)} session(s) written, {len(report.failed)} failed{fix}")
    if not report.results:
        print(f"nothing imported: no {expected} files under {folder}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if report.failed else EXIT_OK


def _lookahead_text(ch: Any) -> str:
    """How far past its rows a channel reads, for ``inspect`` (recorded, its extractor's, or unknown)."""
    known = known_lookahead_s(ch.extractor, ch.extractor_version, ch.params, ch.lookahead_s)
    if known is None:
        return "an unknown time"
    return f"{known:.3g} s" + ("" if ch.lookahead_s is not None else " (its extractor's)")


def print_session(
    store: Any, session: str, meta: Any, keys: list[str], columns: bool = False
) -> None:
    """``featurestore inspect``: a session's frames, labels, ratings and each channel's shape,
    rate, validity and provenance (``columns``: also its column names)."""
    names = meta.corpus_layout.role_names
    people = meta.corpus_layout.people(meta)  # a listed layout's ids as written
    print(
        f"{meta.session}: {people}, split {meta.split}, "
        f"{meta.n_frames} frames at {meta.fps:g} fps ({meta.n_frames / meta.fps:.1f} s)"
    )
    for t in store.label_targets(session):
        y = store.labels(session, t).to_numpy()
        print(
            f"  labels/{t}: {len(y)} rows, mean {np.nanmean(y):+.3f}, std {np.nanstd(y):.3f}, "
            f"range [{np.nanmin(y):+.2f}, {np.nanmax(y):+.2f}]"
        )
    for t, by_rater in store.session_ratings(session).items():
        raters = ", ".join(f"{r} {v:g}" for r, v in by_rater.items() if r)
        mean = store.session_label(session, t)
        print(f"  session_labels/{t}: {mean:g}" + (f" (mean of {raters})" if raters else ""))
    for key in keys:
        ch = store.read_channel(session, key)
        span = float(ch.time[-1] - ch.time[0]) if len(ch.time) > 1 else 0.0
        rate = (len(ch.time) - 1) / span if span > 0 else float("nan")
        print(
            f"  {corpus_key(key, names)}: {ch.data.shape[0]} x {ch.data.shape[1]} at {rate:.4g} Hz, "
            f"valid {ch.valid.mean() if len(ch.valid) else 0:.1%}",
            f"      extractor {ch.extractor} {ch.extractor_version}, cache key {ch.cache_key}, "
            f"created {ch.created_utc}, reads {_lookahead_text(ch)} past each row",
            f"      params {json.dumps(ch.params, sort_keys=True)}",
            f"      source {ch.source.get('path') or ch.source.get('upstream', '')}",
            sep="\n",
        )
        if columns:
            print(f"      columns {', '.join(ch.columns)}")
