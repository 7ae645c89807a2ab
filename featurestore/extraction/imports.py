"""Bring features and labels computed elsewhere into the store: the three importers.

``featurestore import`` (:func:`import_tables`: per-frame CSV/Parquet tables as a channel),
``featurestore labels`` (:func:`import_labels`: annotation CSVs as a target) and ``featurestore
transcripts`` (:func:`import_transcripts`: the ``speech``, ``lexicon`` and per-role voice
channels, into existing shards). Each writes a session in one atomic shard update, and a bad
file is reported for its session in the :class:`ImportReport` while the others go on.
"""

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
from .import_times import check_table_times
from .recordings import OMG_ONLY, Found, Recordings, find_session_files, one_file
from .tables import DEFAULT_MIN_CONFIDENCE, IMPORT_VERSION, TABLE_EXTS, read_table

__all__ = [
    "ImportReport",
    "ImportedChannels",
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
        """Sessions that were not written (their shards are unchanged)."""
        return [r for r in self.results if not r.ok]

    @property
    def succeeded(self) -> list[SessionResult]:
        return [r for r in self.results if r.ok]

    def __str__(self) -> str:
        lines = [str(r) for r in self.results]
        lines += [f"skipped {p}: {self.skip_reason}" for p in self.skipped]
        lines.append(
            f"{self.what}: {len(self.succeeded)} session(s) written, {len(self.failed)} failed"
        )
        return "\n".join(lines)


def _meta_for_new_session(
    session: str, n_frames: int, fps: float, sessions_meta: Mapping[str, SessionMeta] | None
) -> SessionMeta:
    given = (sessions_meta or {}).get(session)
    if given is not None:
        return replace(
            given,
            n_frames=int(given.n_frames) if given.n_frames > 0 else int(n_frames),
            fps=float(fps),
        )
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
    return SessionMeta(
        session,
        listener,
        story,
        STORY_SPEAKER[story],
        story_split(story),
        int(n_frames),
        float(fps),
    )


def _frames_covering(end_s: float, fps: float) -> int:
    """Number of frames at ``fps`` whose start time is at or before ``end_s`` seconds."""
    return int(math.floor(end_s * fps + 1e-6)) + 1


def _import_each(
    found: Found,
    what: str,
    files_are: str,
    one: Callable[[str, Path], str],
    progress: bool,
    errors: tuple[type[BaseException], ...] = (DataImportError, StoreError, OSError),
) -> ImportReport:
    """Run ``one(session, path) -> detail`` for each session's file in ``found``.

    The loop every import shares, over :func:`_find_session_files`' result (files whose
    names carry no session are reported as skipped, refused files as failed), a tqdm bar
    over sessions when ``progress``, two files for one session an error for that session
    (``files_are`` names them, e.g. ``"tables"``), and an
    exception of ``errors`` raised by ``one`` recorded for its session while the others go on
    (``one`` writes a session's shard in a single atomic update, so a failed one is untouched).
    """
    report = ImportReport(what=what, skipped=found.skipped, skip_reason=found.skip_reason)
    for path, (session, why) in found.refused.items():
        report.results.append(SessionResult(session, [path], error=why))
    for session, paths in tqdm(
        found.files.items(),
        total=len(found.files),
        desc=what,
        unit="session",
        disable=not progress,
        leave=False,
    ):
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


@dataclass(frozen=True)
class _TableImport:
    """What :func:`import_tables` stores each table as, and how it reads them."""

    store: Store
    role: str
    channel: str
    fps: float
    sessions_meta: Mapping[str, SessionMeta] | None
    min_confidence: float
    max_overrun_s: float
    groups: Sequence[str] | None
    lookahead_s: float | None

    def meta(self, session: str, path: Path, end_s: float) -> SessionMeta:
        """The session's metadata: its shard's (the table may not run past its end), else new."""
        if not self.store.shard_path(session).exists():
            n = _frames_covering(end_s, LABEL_FPS)
            return _meta_for_new_session(session, n, LABEL_FPS, self.sessions_meta)
        meta = self.store.meta(session)
        end = meta.n_frames / meta.fps
        if end_s > end + self.max_overrun_s:
            raise DataImportError(
                f"{path} runs to {end_s:.2f} s but {session} lasts {end:.2f} s "
                f"({meta.n_frames} frames in its shard); check that the table belongs to this "
                "session and that --fps matches its frame rate"
            )
        return meta

    def __call__(self, session: str, path: Path) -> str:
        """Store one session's table as its channel; the report line."""
        table = read_table(
            path, fps=self.fps, min_confidence=self.min_confidence, groups=self.groups
        )
        meta = self.meta(session, path, table.end_s)
        time_column = str(table.params.get("time_column", ""))
        if problem := check_table_times(
            path, table.features.time, meta.n_frames / meta.fps, session, time_column
        ):
            raise DataImportError(problem)
        source = file_fingerprint(path)
        # a declared look-ahead is in the params (and so the cache key): declaring another one
        # changes the store's fingerprint, so no sweep reuses a run counted with the old one
        params = table.params
        if self.lookahead_s is not None:
            params = {**params, "lookahead_s": self.lookahead_s}
        ch = Channel.from_features(
            table.features,
            extractor=table.extractor,
            extractor_version=IMPORT_VERSION,
            params=params,
            cache_key=cache_key(source, table.extractor, IMPORT_VERSION, params),
            source=source,
            lookahead_s=self.lookahead_s,
        )
        self.store.write_session(meta, channels={f"{self.role}/{self.channel}": ch})
        f = table.features
        return f"{table.kind}, {len(f.time)} rows x {len(f.columns)} columns, {int(f.valid.sum())} valid"


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
) -> ImportReport:
    """Import one per-frame table per session into ``/<role>/<channel>`` of the store.

    ``table_dir`` holds one ``.csv`` / ``.parquet`` table per recording (any depth), named by
    the recording's id (a shard of the store or a row of the ``manifest.json`` that ``scan``
    wrote there) or ``Subject_<L>_Story_<S>`` (any case); with ``session``, ``table_dir`` is
    one table, stored as that recording's. An OMG-Empathy name in a store of a manifest's
    recordings that has no such recording is refused (:class:`Recordings`). Tables are read
    by :func:`featurestore.extraction.tables.read_table` (``fps`` converts ``frame`` columns to
    seconds, ``min_confidence`` and ``groups`` shape OpenFace and py-feat tables). A session
    with a shard keeps its metadata and everything else it holds; a table
    running more than ``max_overrun_s`` seconds past that session's end is an error for the
    session. A session without a shard gets its metadata from ``sessions_meta``, else from the
    store's ``manifest.json``, else from its name, with as many 25 fps frames as the table
    spans. ``lookahead_s``: seconds after a row that the tool read (None: unknown, so no
    configuration reading it is tagged causal; see
    docs/store.md, tables and labels computed elsewhere). Errors of one session are reported
    in the :class:`ImportReport`, its shard untouched; ``progress`` shows a bar.
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
    # a missing folder fails before the store is made
    store = Store(store_root)
    recordings = Recordings.of(store)
    if session is None:
        found = find_session_files(Path(table_dir), TABLE_EXTS, recordings)
    else:
        found = one_file(Path(table_dir), session, recordings, TABLE_EXTS)
    one = _TableImport(
        store=Store(store_root, mode="a"),
        role=role,
        channel=channel,
        fps=fps,
        sessions_meta={**recordings.known, **(sessions_meta or {})},
        min_confidence=min_confidence,
        max_overrun_s=max_overrun_s,
        groups=groups,
        lookahead_s=lookahead_s,
    )
    return _import_each(found, f"import {role}/{channel}", "tables", one, progress)


@dataclass
class ImportedChannels:
    """A manifest's imported tables of one recording (:func:`imported_channels`): the
    ``channels`` to store, the keys ``computed`` and ``current``, and ``errors`` of files
    that cannot be used (each naming the file and the recording)."""

    channels: dict[str, Channel] = field(default_factory=dict)
    computed: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def imported_channels(
    files: Mapping[str, Path],
    meta: SessionMeta,
    stored: Mapping[str, str],
    *,
    force: bool = False,
    max_overrun_s: float = 1.0,
) -> ImportedChannels:
    """The tables a manifest names for one recording (store channel key -> file, e.g.
    ``listener/openface``), read as :func:`import_tables` reads them (a ``frame`` column at
    25 fps, the default column groups, look-ahead unknown), each skipped when ``stored``
    (key -> cache key) holds it from the same content unless ``force``. A table running more
    than ``max_overrun_s`` seconds past the recording's ``meta.n_frames / meta.fps`` or that
    cannot be read is an error of its channel; the others go on."""
    out = ImportedChannels()
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
        ck = cache_key(source, table.extractor, IMPORT_VERSION, table.params)
        if not force and stored.get(key) == ck:
            out.current.append(key)
            continue
        out.channels[key] = Channel.from_features(
            table.features,
            extractor=table.extractor,
            extractor_version=IMPORT_VERSION,
            params=table.params,
            cache_key=ck,
            source=source,
        )
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
) -> ImportReport:
    """Import one annotation CSV per session as ``/labels/<target>``.

    Length policy: labels define the session's frame count. The shard's ``n_frames`` becomes
    the number of label rows (at ``fps`` frames per second, 25 in the corpus), except when the
    shard already holds a channel whose time span (its last time stamp) differs from the
    label duration (the time of the last label frame) by more than ``max_mismatch_s``
    seconds: that is an error for the session and its shard is left untouched. Labels of
    another target with a different length are an error too (the store keeps one frame count
    per session). A session without a shard gets one, with metadata from ``sessions_meta``
    or from its name. ``progress`` shows a bar over sessions (with an ETA).
    """
    if not target or "/" in target or target.strip() != target:
        raise ValueError(f"target name {target!r} must be one non-empty word without '/'")
    if not fps or fps <= 0 or not math.isfinite(fps):
        raise ValueError(f"fps must be a positive number of frames per second, got {fps}")
    recordings = Recordings.of(Store(store_root))
    found = find_session_files(Path(annotation_dir), (".csv",), recordings)
    sessions_meta = {**recordings.known, **(sessions_meta or {})}
    store = Store(store_root, mode="a")

    def one(session: str, path: Path) -> str:
        y = read_annotation(path, label_scale(target, OMG_SCALES))  # OMG's valence: [-1, 1]
        n = len(y)
        label_end = (n - 1) / fps
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
) -> ImportReport:
    """Compute the ``speech`` and ``lexicon`` channels of every transcript into existing shards.

    ``transcript_dir`` holds one ``.srt`` or ``.ass`` file per session, named with
    ``Subject_<L>_Story_<S>`` in any case (``transcribed_subject_1_story_1.srt``,
    ``Subject_1_Story_1.ass``), at any depth. Each session must already have a shard (its
    frame count comes from there): run ``featurestore extract`` first. Where the shard holds
    ``scene/egemaps``, ``speaker/egemaps`` and ``listener/egemaps`` are re-derived with the
    transcript rule (:func:`featurestore.extraction.derived.role_voice_from_transcript`), replacing the
    face rule. Channels whose cache key is current are skipped unless ``force``. Each session
    is written in one atomic update; a bad transcript (unreadable time, two files for one
    session, no shard) is reported for its session, whose shard stays untouched. The
    extractors' settings come from ``cfg`` (default: their defaults), as in ``extract``.
    """
    found = find_session_files(Path(transcript_dir), TRANSCRIPT_EXTS)
    store = Store(store_root, mode="a")

    def one(session: str, path: Path) -> str:
        if not store.shard_path(session).exists():
            raise DataImportError(
                f"no shard for {session} in {store.root}; run `featurestore extract` first (the transcript "
                "channels take the session's frame count from its shard)"
            )
        meta = store.meta(session)
        cues = read_transcript(path)
        source = file_fingerprint(path)
        stored = store.cache_keys(session)
        created = utc_now()
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
        done = sorted(channels)
        return (f"computed {', '.join(done)}" if done else "all current") + f"; {describe(cues)}"

    errors = (TranscriptError, DataImportError, StoreError, OSError)
    return _import_each(found, "transcripts", "transcripts", one, progress, errors)
