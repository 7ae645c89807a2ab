"""Bring features and labels computed elsewhere into the store.

Per-frame tables (``featurestore import``)
    One CSV or Parquet file per session, named ``Subject_<L>_Story_<S>.csv`` / ``.parquet``
    (the name may carry more text; any depth under the folder; any case). Three kinds are
    recognised from the columns:

    * **OpenFace 2.x** (``FeatureExtraction`` output; header names may start with a space):
      the ``AUnn_r`` intensity (0-5) and ``AUnn_c`` presence (0/1) columns are kept; time is
      ``timestamp`` (seconds); a frame is valid when ``success == 1`` and ``confidence >=
      min_confidence``. Stored with extractor ``import:openface``.
    * **py-feat** (``Fex.to_csv`` output: ``FaceRectX`` ... ``FaceScore``, ``AU01`` ...,
      ``frame``): the ``AUnn`` columns are kept, time is ``frame / fps``; of several faces in
      a frame the largest box is kept; a frame without a face is invalid. ``import:pyfeat``.
    * **generic**: a ``time`` column (seconds) or a ``frame`` column (index at ``fps``), an
      optional ``valid`` column (0/1 or bool), and every other column is a numeric feature.
      ``import:table``.

Missing-value policy
    A generic table must be complete: a non-numeric value, NaN or inf in a feature column is a
    :class:`TableError` naming the file, the column and the first bad row (clean the values or
    drop the column), except in rows whose ``valid`` column is 0. In OpenFace and py-feat
    tables, a row where *every* kept feature is NaN is a frame the tool could not analyse: it
    is stored as ``valid=False`` (like a failed OpenFace frame or a py-feat frame without a
    face), not reported. A partly NaN row, or inf anywhere, means a damaged file and is a
    :class:`TableError`. Invalid rows always hold NaN in the store.

Annotations (``featurestore labels``)
    The official per-frame valence CSVs: a single header line (``valence``, or any single
    column name such as the target's) and one value in [-1, 1] per video frame at 25 fps.

Both importers write through :meth:`featurestore.store.Store.write_session`, which replaces
a shard atomically: whatever a shard held before is kept, and a failed session leaves its
shard exactly as it was. Each session is handled on its own: a bad file is reported in the
:class:`ImportReport` and the other sessions go on.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from .config import FeatureConfig
from .manifest import STORY_SPEAKER, story_split
from .store import (
    LABEL_FPS,
    ROLES,
    Channel,
    Features,
    SessionMeta,
    Store,
    StoreError,
    cache_key,
    file_fingerprint,
    parse_session,
    session_name,
)

#: bump when the conversion of an imported table changes (invalidates imported channels)
IMPORT_VERSION = "1"
TABLE_EXTS = (".csv", ".parquet", ".pq")
#: OpenFace frames below this tracking confidence are invalid (0-1)
DEFAULT_MIN_CONFIDENCE = 0.8

_OPENFACE_AU_RE = re.compile(r"^AU\d+_[rc]$")
_PYFEAT_AU_RE = re.compile(r"^AU\d+$")
_PYFEAT_MARKERS = ("FaceRectX", "FaceRectY", "FaceRectWidth", "FaceRectHeight", "FaceScore")


class DataImportError(ValueError):
    """A file given to an importer cannot be used; the message names it and says what to do."""


class TableError(DataImportError):
    """A per-frame table is malformed: names the file, the column(s), the first bad row, the fix."""


class AnnotationError(DataImportError):
    """An annotation CSV is malformed: names the file, the row and what to do."""


@dataclass
class ImportedTable:
    """One per-frame table after reading: features, its kind, and the options that shaped it."""

    path: Path
    kind: str  # openface | pyfeat | table
    features: Features
    params: dict = field(default_factory=dict)

    @property
    def extractor(self) -> str:
        """Provenance name: ``import:openface``, ``import:pyfeat`` or ``import:table``."""
        return f"import:{self.kind}"

    @property
    def end_s(self) -> float:
        """Time of the last row in seconds (0 for an empty table)."""
        return float(self.features.time[-1]) if len(self.features.time) else 0.0


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

    @property
    def failed(self) -> list[SessionResult]:
        """Sessions that were not written (their shards are unchanged)."""
        return [r for r in self.results if not r.ok]

    @property
    def succeeded(self) -> list[SessionResult]:
        return [r for r in self.results if r.ok]

    def __str__(self) -> str:
        lines = [str(r) for r in self.results]
        lines += [f"skipped {p}: name has no Subject_<L>_Story_<S>" for p in self.skipped]
        lines.append(f"{self.what}: {len(self.succeeded)} session(s) written, {len(self.failed)} failed")
        return "\n".join(lines)


# ------------------------------------------------------------------ tables
def _read_frame(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            # OpenFace pads both header names and values with a space after each comma
            df = pd.read_csv(path, skipinitialspace=True, encoding="utf-8-sig", low_memory=False)
    except (OSError, ValueError, ImportError) as e:
        raise TableError(f"{path}: cannot be read as {'Parquet' if suffix != '.csv' else 'CSV'} ({e})") from e
    df.columns = [str(c).strip() for c in df.columns]
    dup = sorted({c for c in df.columns if list(df.columns).count(c) > 1})
    if dup:
        raise TableError(f"{path}: columns {dup} appear more than once; rename or drop the copies")
    if df.empty:
        raise TableError(f"{path}: the table has no rows; re-export it or remove the file")
    return df


def table_kind(columns: Iterable[str]) -> str:
    """``openface``, ``pyfeat`` or ``table`` from a table's (stripped) column names."""
    cols = set(columns)
    if {"success", "confidence", "timestamp"} <= cols and any(_OPENFACE_AU_RE.match(c) for c in cols):
        return "openface"
    if "frame" in cols and any(c in cols for c in _PYFEAT_MARKERS) and any(_PYFEAT_AU_RE.match(c) for c in cols):
        return "pyfeat"
    return "table"


def _row_ref(path: Path, i: int) -> str:
    """Human row reference: data row number (1-based) and, for CSV, the line in the file."""
    if path.suffix.lower() == ".csv":
        return f"row {i + 1} (line {i + 2} of the file)"
    return f"row {i + 1}"


def _numeric(df: pd.DataFrame, cols: list[str], path: Path, check: np.ndarray | None = None) -> np.ndarray:
    """Columns as float64; a value that is not a number is a TableError naming column and row."""
    out = np.empty((len(df), len(cols)), dtype=np.float64)
    bad: list[tuple[int, str, object]] = []
    for j, c in enumerate(cols):
        s = df[c]
        if pd.api.types.is_bool_dtype(s):
            out[:, j] = s.to_numpy(dtype=np.float64)
            continue
        if pd.api.types.is_numeric_dtype(s):
            out[:, j] = s.to_numpy(dtype=np.float64, na_value=np.nan)
            continue
        conv = pd.to_numeric(s, errors="coerce")
        wrong = conv.isna().to_numpy() & s.notna().to_numpy()
        if check is not None:
            wrong &= check
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            bad.append((i, c, s.iloc[i]))
        out[:, j] = conv.to_numpy(dtype=np.float64, na_value=np.nan)
    if bad:
        names = [c for _, c, _ in bad]
        i, c, v = min(bad)
        raise TableError(
            f"{path}: column(s) {names} are not numeric; first bad value {v!r} in column {c!r} at "
            f"{_row_ref(path, i)}. Clean the values or drop the column(s) before importing"
        )
    return out


def _check_finite(values: np.ndarray, cols: list[str], rows: np.ndarray, path: Path, what: str) -> None:
    """TableError for the first NaN/inf among ``rows`` (bool mask) of ``values``."""
    bad = ~np.isfinite(values) & rows[:, None]
    if not bad.any():
        return
    bad_cols = [cols[j] for j in np.flatnonzero(bad.any(axis=0))]
    i = int(np.flatnonzero(bad.any(axis=1))[0])
    j = int(np.flatnonzero(bad[i])[0])
    raise TableError(
        f"{path}: NaN or inf in column(s) {bad_cols} ({what}); first at {_row_ref(path, i)}, "
        f"column {cols[j]!r} = {values[i, j]}. Clean the values (or mark those rows with valid=0) "
        "or drop the column(s) before importing"
    )


def _check_times(t: np.ndarray, path: Path, column: str) -> None:
    if not np.all(np.isfinite(t)):
        i = int(np.flatnonzero(~np.isfinite(t))[0])
        raise TableError(f"{path}: column {column!r} has a missing or infinite value at {_row_ref(path, i)}; every row needs a time")
    if len(t) and t[0] < 0:
        raise TableError(f"{path}: column {column!r} starts at {t[0]} (negative); times are seconds from the session start")
    step = np.diff(t)
    if np.any(step <= 0):
        i = int(np.flatnonzero(step <= 0)[0]) + 1
        raise TableError(
            f"{path}: column {column!r} does not increase at {_row_ref(path, i)} ({t[i - 1]} then {t[i]}); "
            "sort the table by time and keep one row per frame"
        )


def _read_openface(df: pd.DataFrame, path: Path, min_confidence: float) -> tuple[Features, dict]:
    cols = [c for c in df.columns if c.endswith("_r") and _OPENFACE_AU_RE.match(c)]
    cols += [c for c in df.columns if c.endswith("_c") and _OPENFACE_AU_RE.match(c)]
    meta = _numeric(df, ["timestamp", "success", "confidence"], path)
    if "frame" in df.columns and df["frame"].duplicated().any():
        # multi-face output (FaceLandmarkVidMulti): keep the most confident face per frame
        frame = _numeric(df, ["frame"], path)[:, 0]
        order = np.lexsort((-np.nan_to_num(meta[:, 2], nan=-1.0), frame))
        _, first = np.unique(frame[order], return_index=True)
        keep = np.sort(order[first])
        df = df.iloc[keep].reset_index(drop=True)
        meta = meta[keep]
    values = _numeric(df, cols, path)
    t, success, conf = meta[:, 0], meta[:, 1], meta[:, 2]
    time_col = "timestamp"
    if len(t) > 1 and not np.all(np.diff(t) > 0) and "frame" in df.columns:
        # image sequences carry timestamp 0 on every row; OpenFace frames count from 1
        frame = _numeric(df, ["frame"], path)[:, 0]
        if np.all(np.diff(frame) > 0):
            t, time_col = (frame - 1.0) / LABEL_FPS, "frame"
    _check_times(t, path, time_col)
    all_nan = np.all(np.isnan(values), axis=1)
    tracked = (success == 1) & (conf >= min_confidence) & ~all_nan
    _check_finite(values, cols, tracked, path, "in frames OpenFace tracked successfully")
    if np.isinf(values).any():
        _check_finite(values, cols, np.ones(len(values), bool), path, "inf is never a missing-value marker")
    values[~tracked] = np.nan
    return Features(values, t, tracked, cols), {"min_confidence": float(min_confidence), "time_column": time_col}


def _read_pyfeat(df: pd.DataFrame, path: Path, fps: float) -> tuple[Features, dict]:
    from .extractors.face_au import face_present, fex_to_features

    cols = [c for c in df.columns if _PYFEAT_AU_RE.match(c)]
    values = _numeric(df, cols, path)
    frame = _numeric(df, ["frame"], path)[:, 0]
    if not np.all(np.isfinite(frame)) or np.any(frame != np.round(frame)) or np.any(frame < 0):
        i = int(np.flatnonzero(~np.isfinite(frame) | (frame != np.round(frame)) | (frame < 0))[0])
        raise TableError(f"{path}: column 'frame' holds {frame[i]} at {_row_ref(path, i)}; frames are whole numbers from 0")
    markers = [c for c in _PYFEAT_MARKERS if c in df.columns]
    clean = pd.DataFrame(
        {
            **dict(zip(markers, _numeric(df, markers, path).T, strict=True)),
            **dict(zip(cols, values.T, strict=True)),
            "frame": frame.astype(np.int64),
        }
    )
    has_face = face_present(clean) & ~np.all(np.isnan(values), axis=1)
    _check_finite(values, cols, has_face, path, "in rows where py-feat found a face")
    if np.isinf(values).any():
        _check_finite(values, cols, np.ones(len(values), bool), path, "inf is never a missing-value marker")
    frames = np.unique(clean["frame"].to_numpy())
    feats = fex_to_features(clean, times=frames / float(fps), frames=frames, au_columns=cols)
    return feats, {}


def _read_generic(df: pd.DataFrame, path: Path, fps: float) -> tuple[Features, dict]:
    lower = {c.lower(): c for c in df.columns}
    if "time" in lower:
        time_col = lower["time"]
        t = _numeric(df, [time_col], path)[:, 0]
    elif "frame" in lower:
        time_col = lower["frame"]
        t = _numeric(df, [time_col], path)[:, 0] / float(fps)
    else:
        raise TableError(
            f"{path}: no 'time' column (seconds) or 'frame' column (frame index at --fps) among "
            f"{list(df.columns)[:10]}; add one so rows can be placed in time"
        )
    _check_times(t, path, time_col)
    valid_col = lower.get("valid")
    if valid_col is not None:
        v = _numeric(df, [valid_col], path)[:, 0]
        if not np.all(np.isin(v, (0.0, 1.0))):
            i = int(np.flatnonzero(~np.isin(v, (0.0, 1.0)))[0])
            raise TableError(f"{path}: column {valid_col!r} holds {v[i]} at {_row_ref(path, i)}; use 0/1 or true/false")
        valid = v == 1.0
    else:
        valid = np.ones(len(df), dtype=bool)
    skip = {time_col, valid_col, lower.get("frame"), lower.get("time")}
    cols = [c for c in df.columns if c not in skip]
    if not cols:
        raise TableError(f"{path}: no feature columns besides {sorted(c for c in skip if c)}; nothing to import")
    values = _numeric(df, cols, path, check=valid)
    _check_finite(values, cols, valid, path, "a generic table must be complete")
    values[~valid] = np.nan
    return Features(values, t, valid, cols), {"time_column": time_col}


def read_table(
    path: str | Path,
    fps: float = LABEL_FPS,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
) -> ImportedTable:
    """Read one per-frame CSV or Parquet table (OpenFace, py-feat or generic, see the module doc).

    ``fps`` (frames per second) converts a ``frame`` column to seconds; ``min_confidence``
    (0-1) is the OpenFace tracking confidence below which a frame is invalid. Raises
    :class:`TableError` naming the file, column and first bad row when the table cannot be used.
    """
    path = Path(path)
    if not fps or fps <= 0 or not math.isfinite(fps):
        raise ValueError(f"fps must be a positive number of frames per second, got {fps}")
    df = _read_frame(path)
    kind = table_kind(df.columns)
    if kind == "openface":
        feats, extra = _read_openface(df, path, min_confidence)
    elif kind == "pyfeat":
        feats, extra = _read_pyfeat(df, path, fps)
    else:
        feats, extra = _read_generic(df, path, fps)
    params = {"kind": kind, "fps": float(fps), "columns": list(feats.columns), **extra}
    return ImportedTable(path=path, kind=kind, features=feats, params=params)


# ------------------------------------------------------------ file discovery
def _find_session_files(root: Path, exts: tuple[str, ...]) -> tuple[dict[str, list[Path]], list[Path]]:
    if not root.is_dir():
        raise FileNotFoundError(f"folder {root} does not exist; pass the folder holding the Subject_<L>_Story_<S> files")
    found: dict[str, list[Path]] = defaultdict(list)
    skipped: list[Path] = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.suffix.lower() not in exts:
            continue
        if any(part.startswith(".") for part in p.relative_to(root).parts):
            continue
        ls = parse_session(p.stem)
        if ls is None:
            skipped.append(p)
        else:
            found[session_name(*ls)].append(p)
    return dict(sorted(found.items(), key=lambda kv: parse_session(kv[0]))), skipped


def _meta_for_new_session(session: str, n_frames: int, fps: float, sessions_meta: Mapping[str, SessionMeta] | None) -> SessionMeta:
    given = (sessions_meta or {}).get(session)
    if given is not None:
        return replace(given, n_frames=int(given.n_frames) if given.n_frames > 0 else int(n_frames), fps=float(fps))
    listener, story = parse_session(session)
    if story not in STORY_SPEAKER:
        raise DataImportError(
            f"story {story} of {session} has no speaker in the OMG-Empathy story->speaker map; "
            "pass sessions_meta (e.g. from a scan with your story_speaker config)"
        )
    return SessionMeta(session, listener, story, STORY_SPEAKER[story], story_split(story), int(n_frames), float(fps))


def _frames_covering(end_s: float, fps: float) -> int:
    """Number of frames at ``fps`` whose start time is at or before ``end_s`` seconds."""
    return int(math.floor(end_s * fps + 1e-6)) + 1


def _import_each(
    found: tuple[dict[str, list[Path]], list[Path]],
    what: str,
    files_are: str,
    one: Callable[[str, Path], str],
    progress: bool,
    errors: tuple[type[BaseException], ...] = (DataImportError, StoreError, OSError),
) -> ImportReport:
    """Run ``one(session, path) -> detail`` for each session's file in ``found``.

    The loop every import shares, over :func:`_find_session_files`' result (files whose
    names carry no session are reported as skipped), a tqdm bar over sessions when ``progress``, two files for one
    session an error for that session (``files_are`` names them, e.g. ``"tables"``), and an
    exception of ``errors`` raised by ``one`` recorded for its session while the others go on
    (``one`` writes a session's shard in a single atomic update, so a failed one is untouched).
    """
    from tqdm.auto import tqdm

    files, skipped = found
    report = ImportReport(what=what, skipped=skipped)
    for session, paths in tqdm(files.items(), total=len(files), desc=what, unit="session", disable=not progress, leave=False):
        res = SessionResult(session, paths)
        report.results.append(res)
        if len(paths) > 1:
            res.error = f"{len(paths)} {files_are} for one session: {', '.join(str(p) for p in paths)}; keep one and re-run"
            continue
        try:
            res.detail = one(session, paths[0])
        except errors as e:
            res.error = str(e)
    return report


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
) -> ImportReport:
    """Import one per-frame table per session into ``/<role>/<channel>`` of the store.

    ``table_dir`` holds ``Subject_<L>_Story_<S>.csv`` / ``.parquet`` files (any depth, any
    case). ``fps`` converts ``frame`` columns to seconds. A session with a shard keeps its
    metadata and every other channel and label; a table whose last row lies more than
    ``max_overrun_s`` seconds past that session's end (``n_frames / fps``) is an error for the
    session. A session without a shard gets its metadata from ``sessions_meta`` when given,
    else from its name (speaker and split from the OMG-Empathy maps), with ``n_frames`` the
    number of 25 fps frames the table spans. Each channel records its provenance (extractor
    ``import:<kind>``, :data:`IMPORT_VERSION`, read options, source file fingerprint, cache key).

    Errors in one session (unreadable table, two tables, overrun) are reported in the returned
    :class:`ImportReport`; the other sessions go on and the failed session's shard is untouched.
    ``progress`` shows a bar over sessions (with an ETA).
    """
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {ROLES}")
    if not channel or "/" in channel or channel.strip() != channel:
        raise ValueError(f"channel name {channel!r} must be one non-empty word without '/'")
    found = _find_session_files(Path(table_dir), TABLE_EXTS)  # a missing folder fails before the store is made
    store = Store(store_root, mode="a")
    key = f"{role}/{channel}"

    def one(session: str, path: Path) -> str:
        table = read_table(path, fps=fps, min_confidence=min_confidence)
        if store.shard_path(session).exists():
            meta = store.meta(session)
            end = meta.n_frames / meta.fps
            if table.end_s > end + max_overrun_s:
                raise DataImportError(
                    f"{path} runs to {table.end_s:.2f} s but {session} lasts {end:.2f} s "
                    f"({meta.n_frames} frames in its shard); check that the table belongs to this "
                    "session and that --fps matches its frame rate"
                )
        else:
            meta = _meta_for_new_session(session, _frames_covering(table.end_s, LABEL_FPS), LABEL_FPS, sessions_meta)
        source = file_fingerprint(path)
        ch = Channel.from_features(
            table.features,
            extractor=table.extractor,
            extractor_version=IMPORT_VERSION,
            params=table.params,
            cache_key=cache_key(source, table.extractor, IMPORT_VERSION, table.params),
            source=source,
        )
        store.write_session(meta, channels={key: ch})
        f = table.features
        return f"{table.kind}, {len(f.time)} rows x {len(f.columns)} columns, {int(f.valid.sum())} valid"

    return _import_each(found, f"import {key}", "tables", one, progress)


# ------------------------------------------------------------- annotations
def read_annotation(path: str | Path, value_range: tuple[float, float] = (-1.0, 1.0)) -> np.ndarray:
    """Per-frame values of an annotation CSV in the official format, as float32.

    The first line is a single column name (``valence`` in the corpus; any one name is
    accepted), then one number per line, one line per video frame (25 fps). Blank lines at the
    end are ignored. A value that is not a number, NaN, inf, or outside ``value_range``
    raises :class:`AnnotationError` with the file and line.
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise AnnotationError(f"{path}: cannot be read as a text CSV ({e})") from e
    while rows and not any(c.strip() for c in rows[-1]):
        rows.pop()
    if not rows:
        raise AnnotationError(f"{path}: the file is empty; it needs a header line such as 'valence' and one value per frame")
    header = [c.strip() for c in rows[0]]
    if len(header) != 1 or not header[0]:
        raise AnnotationError(f"{path}: header {rows[0]} should be one column name such as 'valence'; one column per file")
    try:
        float(header[0])
    except ValueError:
        pass
    else:
        raise AnnotationError(f"{path}: the first line is the number {header[0]}, not a column name; add a header line 'valence'")
    if len(rows) == 1:
        raise AnnotationError(f"{path}: only a header, no values; the file needs one value per frame")
    lo, hi = value_range
    out = np.empty(len(rows) - 1, dtype=np.float64)
    for i, row in enumerate(rows[1:]):
        line = i + 2
        cells = [c.strip() for c in row]
        if len(cells) != 1:
            raise AnnotationError(f"{path}: line {line} has {len(cells)} fields {row}; the format has one value per line")
        try:
            v = float(cells[0])
        except ValueError:
            raise AnnotationError(f"{path}: line {line} holds {cells[0]!r}, not a number; fix or remove that line") from None
        if not math.isfinite(v) or v < lo - 1e-6 or v > hi + 1e-6:
            raise AnnotationError(
                f"{path}: line {line} holds {v}, outside [{lo}, {hi}]; fix the value (a missing rating "
                "must be filled, e.g. with the previous value)"
            )
        out[i] = v
    return out.astype(np.float32)


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
    found = _find_session_files(Path(annotation_dir), (".csv",))
    store = Store(store_root, mode="a")

    def one(session: str, path: Path) -> str:
        y = read_annotation(path)
        n = len(y)
        label_end = (n - 1) / fps
        if store.shard_path(session).exists():
            meta = store.meta(session)
            for key in store.channel_keys(session):
                t = store.read_channel(session, key).time
                if len(t) and abs(float(t[-1]) - label_end) > max_mismatch_s:
                    raise DataImportError(
                        f"{path} has {n} frames ({label_end:.2f} s) but channel {key} of {session} "
                        f"spans to {float(t[-1]):.2f} s, more than {max_mismatch_s} s apart; check that the "
                        "annotation and the features belong to the same session and frame rate"
                    )
            meta = replace(meta, n_frames=n, fps=float(fps))
        else:
            meta = replace(_meta_for_new_session(session, n, fps, sessions_meta), n_frames=n)
        store.write_session(meta, labels={target: y}, label_sources={target: file_fingerprint(path)})
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
    transcript rule (:func:`featurestore.extract.role_voice_from_transcript`), replacing the
    face rule. Channels whose cache key is current are skipped unless ``force``. Each session
    is written in one atomic update; a bad transcript (unreadable time, two files for one
    session, no shard) is reported for its session, whose shard stays untouched. The
    extractors' settings come from ``cfg`` (default: their defaults), as in ``extract``.
    """
    from .extract import (
        ROLE_VOICE_KEYS,
        compute_transcript_channels,
        role_voice_from_transcript,
        transcript_plan,
        transcript_voice_key,
    )
    from .store import utc_now
    from .transcripts import TRANSCRIPT_EXTS, TranscriptError, describe, read_transcript

    found = _find_session_files(Path(transcript_dir), TRANSCRIPT_EXTS)
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
