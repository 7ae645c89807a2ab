"""The importers of ``featurestore import`` (:func:`import_tables`), ``labels``
(:func:`import_labels`) and ``transcripts`` (:func:`import_transcripts`): each writes a session
in one atomic shard update; a bad file fails its session in the :class:`ImportReport`, the
others go on."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..sources.annotations import read_annotation
from ..sources.import_errors import DataImportError
from ..sources.label_checks import label_scale
from ..sources.manifest import OMG_SCALES, STORY_SPEAKER, story_split
from ..sources.transcripts import TRANSCRIPT_EXTS, TranscriptError, describe, read_transcript
from ..storage.provenance import cache_key, file_fingerprint, utc_now
from ..storage.roles import STORE_ROLES, store_role
from ..storage.shard import LABEL_FPS
from ..storage.store import Channel, SessionMeta, Store, StoreError, parse_session
from .config import FeatureConfig
from .derived import (
    ROLE_VOICE_KEYS,
    compute_transcript_channels,
    role_voice_from_transcript,
    transcript_plan,
    transcript_voice_key,
)
from .plan import StepResult
from .recordings import OMG_ONLY, Found, Recordings, find_session_files, one_file
from .tables import (
    DEFAULT_MIN_CONFIDENCE,
    IMPORT_VERSION,
    TABLE_EXTS,
    ImportedTable,
    check_table_times,
    read_table,
)

__all__ = [
    "ImportReport",
    "SessionResult",
    "import_labels",
    "import_tables",
    "import_transcripts",
    "imported_channels",
]


@dataclass
class SessionResult:
    """Outcome of one session in an import: ``error`` is None when it was written."""

    session: str
    paths: list[Path]
    error: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    def __str__(self) -> str:
        where = ", ".join(str(p) for p in self.paths)
        if self.ok:
            return f"ok     {self.session}: {self.detail} ({where})"
        return f"FAILED {self.session}: {self.error}"


@dataclass
class ImportReport:
    """What an import did, per session, plus files whose names carry no session."""

    what: str
    results: list[SessionResult] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    skip_reason: str = OMG_ONLY

    @property
    def failed(self) -> list[SessionResult]:
        return [r for r in self.results if not r.ok]

    @property
    def succeeded(self) -> list[SessionResult]:
        return [r for r in self.results if r.ok]

    def __str__(self) -> str:
        lines = [str(r) for r in self.results] + [
            f"skipped {p}: {self.skip_reason}" for p in self.skipped
        ]
        ok, failed = len(self.succeeded), len(self.failed)
        return "\n".join([*lines, f"{self.what}: {ok} session(s) written, {failed} failed"])


def _meta_for_new_session(
    session: str, n_frames: int, fps: float, sessions_meta: Mapping[str, SessionMeta] | None
) -> SessionMeta:
    given = (sessions_meta or {}).get(session)
    if given is not None:
        n = int(given.n_frames) if given.n_frames > 0 else int(n_frames)
        return replace(given, n_frames=n, fps=float(fps))
    parsed = parse_session(session)
    if parsed is None:
        raise DataImportError(
            f"{session} is not a session name; name the files Subject_<L>_Story_<S>"
        )
    listener, story = parsed
    if story not in STORY_SPEAKER:
        raise DataImportError(
            f"story {story} of {session} has no speaker in the OMG-Empathy story->speaker map; "
            "pass sessions_meta (e.g. from a scan with your story_speaker config)"
        )
    speaker, split = STORY_SPEAKER[story], story_split(story)
    return SessionMeta(session, listener, story, speaker, split, int(n_frames), float(fps))


def _import_each(
    found: Found,
    what: str,
    files_are: str,
    one: Callable[[str, Path], str],
    progress: bool,
    errors: tuple[type[BaseException], ...] = (DataImportError, StoreError, OSError),
) -> ImportReport:
    """Run ``one(session, path) -> detail`` for each session's file in ``found`` (a bar when
    ``progress``): two files of one session (``files_are``), a refused file or an exception
    of ``errors`` fail that session (``one`` writes its shard in one atomic update), the
    others go on."""
    report = ImportReport(what=what, skipped=found.skipped, skip_reason=found.skip_reason)
    for path, (session, why) in found.refused.items():
        report.results.append(SessionResult(session, [path], error=why))
    bar = tqdm(found.files.items(), desc=what, unit="session", disable=not progress, leave=False)
    for session, paths in bar:
        res = SessionResult(session, paths)
        report.results.append(res)
        if len(paths) > 1:
            res.error = (
                f"{len(paths)} {files_are} for one session: "
                f"{', '.join(str(p) for p in paths)}; keep one and re-run"
            )
            continue
        try:
            res.detail = one(session, paths[0])
        except errors as e:
            res.error = str(e)
    return report


def _table_channel(table: ImportedTable, source: dict, lookahead_s: float | None = None) -> Channel:
    """``table`` as a channel, with its provenance."""
    # a declared look-ahead is in the params (and so the cache key): declaring another one
    # changes the store's fingerprint, so no sweep reuses a run counted with the old one
    params = table.params if lookahead_s is None else {**table.params, "lookahead_s": lookahead_s}
    return Channel.from_features(
        table.features,
        extractor=table.extractor,
        extractor_version=IMPORT_VERSION,
        params=params,
        cache_key=cache_key(source, table.extractor, IMPORT_VERSION, params),
        source=source,
        lookahead_s=lookahead_s,
    )


def import_tables(
    table_dir: str | Path,
    store_root: str | Path,
    role: str,
    channel: str,
    fps: float = LABEL_FPS,
    sessions_meta: Mapping[str, SessionMeta] | None = None,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    max_overrun_s: float = 1.0,
    progress: bool = False,
    groups: Sequence[str] | None = None,
    lookahead_s: float | None = None,
    session: str | None = None,
    allow_outside: bool = False,
) -> ImportReport:
    """Import one per-frame table per session into ``/<role>/<channel>`` of the store.

    ``table_dir`` holds one ``.csv`` / ``.parquet`` table per recording (any depth), named by
    its recording id or ``Subject_<L>_Story_<S>`` (:class:`Recordings`); with ``session``,
    ``table_dir`` is one table, stored as that recording's. Tables are read by
    :func:`~featurestore.extraction.tables.read_table` (``fps``, ``min_confidence``,
    ``groups``). A table running more than ``max_overrun_s`` seconds past its session's shard
    is an error; a session without a shard gets its metadata from ``sessions_meta``, the
    store's ``manifest.json`` or its name. ``lookahead_s``: seconds after a row that the tool
    read (None: unknown). See docs/store.md (tables and labels computed elsewhere).
    """
    role = store_role(role) or role  # a layout's words: person, partner
    if role not in STORE_ROLES:
        raise ValueError(f"role {role!r} is not one of {STORE_ROLES} (or person, partner)")
    if not channel or "/" in channel or channel.strip() != channel:
        raise ValueError(f"channel name {channel!r} must be one non-empty word without '/'")
    if lookahead_s is not None and not float(lookahead_s) >= 0:
        raise ValueError(
            f"lookahead_s must be >= 0 seconds (inf: the whole session), got {lookahead_s}"
        )
    recordings = Recordings.of(Store(store_root))  # a missing folder fails before the store is made
    if session is None:
        found = find_session_files(Path(table_dir), TABLE_EXTS, recordings, allow_outside)
    else:
        found = one_file(Path(table_dir), session, recordings, TABLE_EXTS)
    store = Store(store_root, mode="a")
    sessions_meta = {**recordings.known, **(sessions_meta or {})}

    def meta_of(session: str, path: Path, end_s: float) -> SessionMeta:
        """The session's shard's metadata (the table may not run past its end), else new."""
        if not store.shard_path(session).exists():
            n = int(math.floor(end_s * LABEL_FPS + 1e-6)) + 1  # the frames starting by end_s
            return _meta_for_new_session(session, n, LABEL_FPS, sessions_meta)
        meta = store.meta(session)
        end = meta.n_frames / meta.fps
        if end_s > end + max_overrun_s:
            raise DataImportError(
                f"{path} runs to {end_s:.2f} s but {session} lasts {end:.2f} s "
                f"({meta.n_frames} frames in its shard); check that the table belongs to this "
                "session and that --fps matches its frame rate"
            )
        return meta

    def one(session: str, path: Path) -> str:
        table = read_table(path, fps=fps, min_confidence=min_confidence, groups=groups)
        f = table.features
        meta = meta_of(session, path, table.end_s)
        time_column = str(table.params.get("time_column", ""))
        if problem := check_table_times(
            path, f.time, meta.n_frames / meta.fps, session, time_column
        ):
            raise DataImportError(problem)
        ch = _table_channel(table, file_fingerprint(path), lookahead_s)
        store.write_session(meta, channels={f"{role}/{channel}": ch})
        return f"{table.kind}, {len(f.time)} rows x {len(f.columns)} columns, {int(f.valid.sum())} valid"

    return _import_each(found, f"import {role}/{channel}", "tables", one, progress)


def imported_channels(
    files: Mapping[str, Path],
    meta: SessionMeta,
    stored: Mapping[str, str],
    *,
    force: bool = False,
    max_overrun_s: float = 1.0,
) -> StepResult:
    """The tables a manifest names for one recording (channel key -> file), read as
    :func:`import_tables` reads them, each skipped when ``stored`` (key -> cache key) holds it
    unless ``force``; a table that cannot be read or runs more than ``max_overrun_s`` past the
    recording is an error of its channel."""
    out = StepResult()
    end = meta.n_frames / meta.fps
    for key, path in sorted(files.items()):
        try:
            source = file_fingerprint(path)
            table = read_table(path, fps=LABEL_FPS)
            if table.end_s > end + max_overrun_s:
                raise DataImportError(
                    f"{path} runs to {table.end_s:.2f} s but {meta.session} lasts {end:.2f} s; "
                    "check that the table belongs to this recording (a `frame` column is read "
                    f"at {LABEL_FPS:g} fps: give a `time` or `timestamp` column in seconds)"
                )
        except (DataImportError, OSError) as e:
            out.errors.append(f"{meta.session}: {key} not stored: {e}")
            continue
        ch = _table_channel(table, source)
        if not force and stored.get(key) == ch.cache_key:
            out.current.append(key)
        else:
            out.channels[key] = ch
            out.computed.append(key)
    return out


def import_labels(
    annotation_dir: str | Path,
    store_root: str | Path,
    target: str,
    fps: float = LABEL_FPS,
    sessions_meta: Mapping[str, SessionMeta] | None = None,
    max_mismatch_s: float = 1.0,
    progress: bool = False,
    allow_outside: bool = False,
) -> ImportReport:
    """Import one annotation CSV per session as ``/labels/<target>``.

    Labels define the session's frame count (rows at ``fps``): a stored channel spanning more
    than ``max_mismatch_s`` seconds more or less, or another target of another length, is an
    error of the session (its shard untouched). A session without a shard gets one, with
    metadata from ``sessions_meta`` or from its name.
    """
    if not target or "/" in target or target.strip() != target:
        raise ValueError(f"target name {target!r} must be one non-empty word without '/'")
    if not fps or fps <= 0 or not math.isfinite(fps):
        raise ValueError(f"fps must be a positive number of frames per second, got {fps}")
    recordings = Recordings.of(Store(store_root))
    found = find_session_files(Path(annotation_dir), (".csv",), recordings, allow_outside)
    sessions_meta = {**recordings.known, **(sessions_meta or {})}
    store = Store(store_root, mode="a")

    def one(session: str, path: Path) -> str:
        y = read_annotation(path, label_scale(target, OMG_SCALES))  # OMG's valence: [-1, 1]
        n, label_end = len(y), (len(y) - 1) / fps
        if store.shard_path(session).exists():
            with store.open_session(session) as shard:
                meta = shard.meta
                ends = {key: shard.channel(key).time[-1:] for key in shard.channel_keys()}
            for key, end in ends.items():
                if len(end) and abs(float(end[0]) - label_end) > max_mismatch_s:
                    raise DataImportError(
                        f"{path} has {n} frames ({label_end:.2f} s) but channel {key} of {session} "
                        f"spans to {float(end[0]):.2f} s, more than {max_mismatch_s} s apart; check that the "
                        "annotation and the features belong to the same session and frame rate"
                    )
            meta = replace(meta, n_frames=n, fps=float(fps))
        else:
            meta = replace(_meta_for_new_session(session, n, fps, sessions_meta), n_frames=n)
        store.write_session(
            meta, labels={target: y}, label_sources={target: file_fingerprint(path)}
        )
        return f"{n} frames ({n / fps:.1f} s), mean {float(np.mean(y)):+.3f}"

    return _import_each(found, f"labels {target}", "annotation files", one, progress)


# ------------------------------------------------------------- transcripts
def import_transcripts(
    transcript_dir: str | Path,
    store_root: str | Path,
    force: bool = False,
    progress: bool = False,
    cfg: FeatureConfig | None = None,
    allow_outside: bool = False,
) -> ImportReport:
    """Compute the ``speech`` and ``lexicon`` channels of every transcript into existing shards.

    ``transcript_dir`` holds one ``.srt`` or ``.ass`` file per session, named with
    ``Subject_<L>_Story_<S>`` in any case, at any depth; each session needs a shard (its frame
    count). Where it holds ``scene/egemaps``, the per-role voice is re-derived with the
    transcript rule. Current channels are skipped unless ``force``; the extractors' settings
    come from ``cfg`` (default: their defaults).
    """
    found = find_session_files(Path(transcript_dir), TRANSCRIPT_EXTS, None, allow_outside)
    store = Store(store_root, mode="a")

    def one(session: str, path: Path) -> str:
        if not store.shard_path(session).exists():
            raise DataImportError(
                f"no shard for {session} in {store.root}; run `featurestore extract` first (the transcript "
                "channels take the session's frame count from its shard)"
            )
        meta, cues, source = store.meta(session), read_transcript(path), file_fingerprint(path)
        stored, created = store.cache_keys(session), utc_now()
        plan = transcript_plan(("speech", "lexicon"), meta.n_frames, source, cfg)
        todo = [k for k, (_, ck, _) in plan.items() if force or stored.get(k) != ck]
        channels = compute_transcript_channels(plan, todo, cues, source, created)
        scene_key = stored.get("scene/egemaps")
        if scene_key:
            _, voice_key, _ = transcript_voice_key(scene_key, source)
            if force or any(stored.get(k) != voice_key for k in ROLE_VOICE_KEYS):
                scene = store.read_channel(session, "scene/egemaps")
                channels.update(role_voice_from_transcript(scene, scene_key, cues, source, created))
        if channels:
            store.write_session(meta, channels=channels)
        done = f"computed {', '.join(sorted(channels))}" if channels else "all current"
        return f"{done}; {describe(cues)}"

    errors = (TranscriptError, DataImportError, StoreError, OSError)
    return _import_each(found, "transcripts", "transcripts", one, progress, errors)
