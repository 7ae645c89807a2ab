"""Per-frame tables computed elsewhere (OpenFace, py-feat, any CSV/Parquet) read as
:class:`Features`, the kind recognised from the columns; see docs/store.md (tables and labels
computed elsewhere). A generic table must be complete; in OpenFace and py-feat tables an all-NaN
row is a frame the tool could not analyse (invalid), a partly NaN row or an inf an error.

>>> table_kind(["frame", "timestamp", "confidence", "success", "AU01_r"]), table_kind(["time", "x"])
('openface', 'table')
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..extractors.face_au import face_present, fex_to_features
from ..features import Features
from ..sources.import_errors import DataImportError
from ..sources.label_checks import DEFAULT_MIN_COVERAGE
from ..storage.shard import LABEL_FPS

#: bump when the conversion of an imported table changes (invalidates imported channels)
IMPORT_VERSION = "2"  # 2: OpenFace and py-feat keep head pose, gaze and emotions (column groups)
TABLE_EXTS = (".csv", ".parquet", ".pq")
#: OpenFace frames below this tracking confidence are invalid (0-1)
DEFAULT_MIN_CONFIDENCE = 0.8

_OPENFACE_AU_ORDER = (re.compile(r"^AU\d+_r$"), re.compile(r"^AU\d+_c$"))

#: table kind -> column group -> the patterns of its columns (kept in the table's order,
#: pattern by pattern)
COLUMN_GROUPS: dict[str, dict[str, tuple[re.Pattern, ...]]] = {
    "openface": {
        "au": _OPENFACE_AU_ORDER,
        "pose": (re.compile(r"^pose_[TR][xyz]$"),),
        "gaze": (re.compile(r"^gaze_[01]_[xyz]$"), re.compile(r"^gaze_angle_[xy]$")),
        "landmarks": (re.compile(r"^[xy]_\d+$"),),
        "landmarks_3d": (re.compile(r"^[XYZ]_\d+$"),),
        "eye_landmarks": (re.compile(r"^eye_lmk_[xyXYZ]_\d+$"),),
        "shape": (re.compile(r"^p_(scale|r[xyz]|t[xy]|\d+)$"),),
    },
    "pyfeat": {
        "au": (re.compile(r"^AU\d+$"),),
        "emotion": (re.compile(r"^(anger|disgust|fear|happiness|sadness|surprise|neutral)$"),),
        "pose": (re.compile(r"^(Pitch|Roll|Yaw)$"),),
        "landmarks": (re.compile(r"^[xy]_\d+$"),),
    },
}
#: the groups kept when none are named (those the table has)
DEFAULT_GROUPS: dict[str, tuple[str, ...]] = {
    "openface": ("au", "pose", "gaze"),
    "pyfeat": ("au", "emotion", "pose"),
}
_PYFEAT_MARKERS = ("FaceRectX", "FaceRectY", "FaceRectWidth", "FaceRectHeight", "FaceScore")


class TableError(DataImportError):
    """A per-frame table is malformed: names the file, the column(s), the first bad row, the fix."""


@dataclass
class ImportedTable:
    """One per-frame table after reading: features, its kind, and the options that shaped it."""

    path: Path
    kind: str  # openface | pyfeat | table
    features: Features
    params: dict = field(default_factory=dict)

    @property
    def extractor(self) -> str:
        return f"import:{self.kind}"

    @property
    def end_s(self) -> float:
        """Time of the last row in seconds (0 for an empty table)."""
        return float(self.features.time[-1]) if len(self.features.time) else 0.0


def _read_frame(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            # OpenFace pads both header names and values with a space after each comma
            df = pd.read_csv(path, skipinitialspace=True, encoding="utf-8-sig", low_memory=False)
    except (OSError, ValueError, ImportError) as e:
        raise TableError(
            f"{path}: cannot be read as {'Parquet' if suffix != '.csv' else 'CSV'} ({e})"
        ) from e
    df.columns = [str(c).strip() for c in df.columns]
    dup = sorted({c for c in df.columns if list(df.columns).count(c) > 1})
    if dup:
        raise TableError(f"{path}: columns {dup} appear more than once; rename or drop the copies")
    if df.empty:
        raise TableError(f"{path}: the table has no rows; re-export it or remove the file")
    return df


def _has_group(cols: set[str], kind: str, groups: Iterable[str] | None = None) -> bool:
    """Some column of ``cols`` belongs to one of ``groups`` (default: any) of ``kind``."""
    known = COLUMN_GROUPS[kind]
    return any(p.match(c) for g in groups or known for p in known[g] for c in cols)


def table_kind(columns: Iterable[str]) -> str:
    """``openface``, ``pyfeat`` or ``table`` from a table's (stripped) column names."""
    cols = set(columns)
    if {"success", "confidence", "timestamp"} <= cols and _has_group(cols, "openface"):
        return "openface"
    if (
        "frame" in cols
        and any(c in cols for c in _PYFEAT_MARKERS)
        and _has_group(cols, "pyfeat", ("au", "emotion", "pose"))
    ):
        return "pyfeat"
    return "table"


def _row_ref(path: Path, i: int) -> str:
    """Data row number (1-based) and, for CSV, the line in the file."""
    return f"row {i + 1}" + (
        f" (line {i + 2} of the file)" if path.suffix.lower() == ".csv" else ""
    )


def _numeric(
    df: pd.DataFrame, cols: list[str], path: Path, check: np.ndarray | None = None
) -> np.ndarray:
    """Columns as float64; a value that is not a number is a TableError naming column and row."""
    out = np.empty((len(df), len(cols)), dtype=np.float64)
    bad: list[tuple[int, str, object]] = []
    for j, c in enumerate(cols):
        s = df[c]
        if pd.api.types.is_numeric_dtype(s):  # bool too
            out[:, j] = s.to_numpy(dtype=np.float64, na_value=np.nan)
            continue
        conv = pd.to_numeric(s, errors="coerce")
        wrong = conv.isna().to_numpy() & s.notna().to_numpy() & (True if check is None else check)
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


def _check_finite(
    values: np.ndarray, cols: list[str], rows: np.ndarray, path: Path, what: str, inf: bool = False
) -> None:
    """TableError for the first NaN/inf among ``rows`` (bool mask) of ``values`` (``inf``: in any row)."""
    bad = ~np.isfinite(values) & rows[:, None]
    if not bad.any():
        if inf and np.isinf(values).any():
            _check_finite(
                values,
                cols,
                np.ones(len(values), bool),
                path,
                "inf is never a missing-value marker",
            )
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
        raise TableError(
            f"{path}: column {column!r} has a missing or infinite value at {_row_ref(path, i)}; every row needs a time"
        )
    if len(t) and t[0] < 0:
        raise TableError(
            f"{path}: column {column!r} starts at {t[0]} (negative); times are seconds from the session start"
        )
    step = np.diff(t)
    if np.any(step <= 0):
        i = int(np.flatnonzero(step <= 0)[0]) + 1
        raise TableError(
            f"{path}: column {column!r} does not increase at {_row_ref(path, i)} ({t[i - 1]} then {t[i]}); "
            "sort the table by time and keep one row per frame"
        )


def group_columns(
    columns: Sequence[str], kind: str, groups: Sequence[str] | None, path: Path
) -> tuple[list[str], list[str]]:
    """(columns kept, groups kept) of a table of ``kind`` (``openface``/``pyfeat``): those of
    ``groups``, else of :data:`DEFAULT_GROUPS` that the table has; TableError for an unknown
    group, a named group the table lacks, or no column kept.

    >>> group_columns(["AU01_r", "pose_Rx", "AU01_c", "x_0"], "openface", None, Path("t.csv"))
    (['AU01_r', 'AU01_c', 'pose_Rx'], ['au', 'pose'])
    """
    known = COLUMN_GROUPS[kind]
    unknown = [g for g in groups or () if g not in known]
    if unknown:
        raise TableError(
            f"{path}: unknown column group(s) {unknown} for a {kind} table; "
            f"groups: {', '.join(known)}"
        )
    wanted = list(groups) if groups else list(DEFAULT_GROUPS[kind])
    cols: list[str] = []
    kept: list[str] = []
    for g in wanted:
        found = [c for pattern in known[g] for c in columns if pattern.match(c)]
        if not found and groups:
            raise TableError(
                f"{path}: column group {g!r} asked for, but the {kind} table has none of its "
                f"columns ({', '.join(p.pattern for p in known[g])}); re-run the tool with that "
                "output on, or leave the group out"
            )
        if found:
            cols += [c for c in found if c not in cols]
            kept.append(g)
    if not cols:
        raise TableError(
            f"{path}: none of the {kind} column groups {wanted} found; nothing to import"
        )
    return cols, kept


def _read_openface(
    df: pd.DataFrame, path: Path, min_confidence: float, groups: Sequence[str] | None = None
) -> tuple[Features, dict]:
    cols, kept = group_columns(list(df.columns), "openface", groups, path)
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
    _check_finite(values, cols, tracked, path, "in frames OpenFace tracked successfully", inf=True)
    values[~tracked] = np.nan
    return Features(values, t, tracked, cols), {
        "min_confidence": float(min_confidence),
        "time_column": time_col,
        "groups": kept,
    }


def _read_pyfeat(
    df: pd.DataFrame, path: Path, fps: float, groups: Sequence[str] | None = None
) -> tuple[Features, dict]:
    cols, kept = group_columns(list(df.columns), "pyfeat", groups, path)
    values = _numeric(df, cols, path)
    frame = _numeric(df, ["frame"], path)[:, 0]
    if not np.all(np.isfinite(frame)) or np.any(frame != np.round(frame)) or np.any(frame < 0):
        i = int(np.flatnonzero(~np.isfinite(frame) | (frame != np.round(frame)) | (frame < 0))[0])
        raise TableError(
            f"{path}: column 'frame' holds {frame[i]} at {_row_ref(path, i)}; frames are whole numbers from 0"
        )
    markers = [c for c in _PYFEAT_MARKERS if c in df.columns]
    clean = pd.DataFrame(
        {
            **dict(zip(markers, _numeric(df, markers, path).T, strict=True)),
            **dict(zip(cols, values.T, strict=True)),
            "frame": frame.astype(np.int64),
        }
    )
    has_face = face_present(clean) & ~np.all(np.isnan(values), axis=1)
    _check_finite(values, cols, has_face, path, "in rows where py-feat found a face", inf=True)
    frames = np.unique(clean["frame"].to_numpy())
    feats = fex_to_features(clean, times=frames / float(fps), frames=frames, au_columns=cols)
    return feats, {"groups": kept}


def _read_generic(df: pd.DataFrame, path: Path, fps: float) -> tuple[Features, dict]:
    lower = {c.lower(): c for c in df.columns}
    time_col = lower.get("time") or lower.get("frame")
    if time_col is None:
        raise TableError(
            f"{path}: no 'time' column (seconds) or 'frame' column (frame index at --fps) among "
            f"{list(df.columns)[:10]}; add one so rows can be placed in time"
        )
    t = _numeric(df, [time_col], path)[:, 0] / (1.0 if "time" in lower else float(fps))
    _check_times(t, path, time_col)
    valid_col = lower.get("valid")
    valid = np.ones(len(df), dtype=bool)
    if valid_col is not None:
        v = _numeric(df, [valid_col], path)[:, 0]
        if not np.all(np.isin(v, (0.0, 1.0))):
            i = int(np.flatnonzero(~np.isin(v, (0.0, 1.0)))[0])
            raise TableError(
                f"{path}: column {valid_col!r} holds {v[i]} at {_row_ref(path, i)}; use 0/1 or true/false"
            )
        valid = v == 1.0
    skip = {time_col, valid_col, lower.get("frame"), lower.get("time")}
    cols = [c for c in df.columns if c not in skip]
    if not cols:
        raise TableError(
            f"{path}: no feature columns besides {sorted(c for c in skip if c)}; nothing to import"
        )
    values = _numeric(df, cols, path, check=valid)
    _check_finite(values, cols, valid, path, "a generic table must be complete")
    values[~valid] = np.nan
    return Features(values, t, valid, cols), {"time_column": time_col}


def read_table(
    path: str | Path,
    fps: float = LABEL_FPS,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    groups: Sequence[str] | None = None,
) -> ImportedTable:
    """Read one per-frame CSV or Parquet table (OpenFace, py-feat or generic, see the module doc).

    ``fps`` converts a ``frame`` column to seconds; ``min_confidence`` (0-1): the OpenFace
    tracking confidence below which a frame is invalid; ``groups``: the column groups an
    OpenFace or py-feat table keeps (None: :data:`DEFAULT_GROUPS`). A table that cannot be used
    is a :class:`TableError` naming the file, column and first bad row.
    """
    path = Path(path)
    if not fps or fps <= 0 or not math.isfinite(fps):
        raise ValueError(f"fps must be a positive number of frames per second, got {fps}")
    df = _read_frame(path)
    kind = table_kind(df.columns)
    if kind == "openface":
        feats, extra = _read_openface(df, path, min_confidence, groups)
    elif kind == "pyfeat":
        feats, extra = _read_pyfeat(df, path, fps, groups)
    elif groups:
        raise TableError(
            f"{path}: column groups {list(groups)} apply to OpenFace and py-feat tables; this is a "
            "generic table (every numeric column is kept): drop the groups or the columns"
        )
    else:
        feats, extra = _read_generic(df, path, fps)
    params = {"kind": kind, "fps": float(fps), "columns": list(feats.columns), **extra}
    return ImportedTable(path=path, kind=kind, features=feats, params=params)


#: the share of its recording an imported table's rows must cover, at their own step
MIN_SHARE = DEFAULT_MIN_COVERAGE
#: the time columns holding seconds a tool wrote (checked); ``frame`` columns are not
TIMESTAMP_COLUMNS = ("timestamp", "time")


def check_table_times(
    path: str | Path, times: np.ndarray, duration_s: float, session: str, column: str
) -> str:
    """The problem of a table whose ``times`` (from its ``column``) step so that its rows cover
    less than :data:`MIN_SHARE` of the recording (its timestamps in another unit or at another
    frame rate, e.g. OpenFace run with the wrong ``-fps``); ``""`` when they agree or cannot be
    compared.

    >>> print(check_table_times("of.csv", np.arange(180) * 0.001, 18.0, "rec01", "timestamp")[:51])
    of.csv: column 'timestamp' steps 0.001 s (1000 Hz):
    >>> check_table_times("of.csv", np.arange(180) * 0.1, 18.0, "rec01", "timestamp")
    ''
    """
    n = len(times)
    if n < 2 or duration_s <= 0 or column.lower() not in TIMESTAMP_COLUMNS:
        return ""
    step = float(np.median(np.diff(times)))
    covered = min(n * step, duration_s)
    if covered >= MIN_SHARE * duration_s:
        return ""
    fits = duration_s / n
    return (
        f"{path}: column {column!r} steps {step:g} s ({1 / step:g} Hz): its {n} rows span "
        f"{float(times[0]):.3f}-{float(times[-1]):.3f} s, {covered / duration_s:.0%} of "
        f"{session} ({duration_s:.2f} s), whose length {n} rows would fill at a step of "
        f"{fits:.3g} s ({1 / fits:.3g} Hz). The timestamps are in another unit or at another "
        "frame rate than the recording's: write them in seconds from the recording's start "
        "(re-run OpenFace with the clip's frame rate, -fps), or check that the table belongs to "
        "this recording"
    )
