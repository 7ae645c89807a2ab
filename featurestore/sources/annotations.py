"""Official per-frame annotation CSVs (valence), read and checked.

The format of OMG-Empathy's ratings: a single header line (``valence``, or any single column
name such as the target's) and one value per video frame at 25 fps; or a two-column CSV
``time,<name>`` (seconds, any rate). Values are on the target's own scale: any finite number,
or within a declared ``scale`` (:mod:`featurestore.sources.label_checks`; the OMG layout
declares [-1, 1] for its valence targets). Used by ``featurestore labels``
(:func:`featurestore.extraction.imports.import_labels`) and by extraction, whose labels define a
session's frame count.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import nearest
from .import_errors import DataImportError


class AnnotationError(DataImportError):
    """An annotation CSV is malformed: names the file, the row and what to do."""


#: the two rating-file formats, quoted by every header error (as docs/corpus.md gives them)
FORMATS = (
    "a rating file is either one column (a header such as 'valence', then one value per 25 fps "
    "frame) or two columns 'time,<name>' (e.g. 'time,valence': seconds from the recording's "
    "start, increasing, at any rate)"
)


def _outside(v: float, value_range: tuple[float, float] | None) -> bool:
    """``v`` lies outside ``value_range`` (None: no declared scale, any finite value is in)."""
    if value_range is None:
        return False
    lo, hi = value_range
    return bool(v < lo - 1e-6 or v > hi + 1e-6)


def _scale_fix(value_range: tuple[float, float]) -> str:
    lo, hi = value_range
    return (
        f"outside the declared scale [{lo:g}, {hi:g}]; fix the value, or the target's scale "
        "(`targets: {<target>: {scale: [lo, hi]}}` in featurestore.yaml or the manifest)"
    )


_NAME = r"[A-Za-z_][\w@. -]{0,30}"
_HEADER_LIKE = re.compile(rf"{_NAME}(,{_NAME}){{0,3}}")


def _shown(header: list[str]) -> str:
    """``header 'a,b'`` when it reads as a rating file's column names, else only its field count
    (a file of another kind is never quoted)."""
    text = ",".join(header)
    if _HEADER_LIKE.fullmatch(text):
        return f"header {text!r}"
    return f"its header ({len(header)} fields)"


def read_annotation(path: str | Path, value_range: tuple[float, float] | None = None) -> np.ndarray:
    """Per-frame values of an annotation CSV in the official format, as float32.

    The first line is a single column name (``valence`` in the corpus; any one name is
    accepted), then one number per line, one line per video frame (25 fps). Blank lines at the
    end are ignored. A value that is not a number, NaN, inf, or outside ``value_range`` (the
    target's declared scale, in its own units; None: any finite value) raises
    :class:`AnnotationError` with the file and line.
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
        raise AnnotationError(
            f"{path}: the file is empty; it needs a header line such as 'valence' and one value per frame"
        )
    header = [c.strip() for c in rows[0]]
    if len(header) != 1 or not header[0]:
        raise AnnotationError(
            f"{path}: {_shown(header)} is not one column name such as 'valence'; {FORMATS}"
        )
    try:
        float(header[0])
    except ValueError:
        pass
    else:
        raise AnnotationError(
            f"{path}: the first line is the number {header[0]}, not a column name; add a header "
            f"line such as 'valence' ({FORMATS})"
        )
    if len(rows) == 1:
        raise AnnotationError(
            f"{path}: only a header, no values; the file needs one value per frame"
        )
    out = np.empty(len(rows) - 1, dtype=np.float64)
    for i, row in enumerate(rows[1:]):
        line = i + 2
        cells = [c.strip() for c in row]
        if len(cells) != 1:
            raise AnnotationError(
                f"{path}: line {line} has {len(cells)} fields; the format has one value per line"
            )
        try:
            v = float(cells[0])
        except ValueError:
            raise AnnotationError(
                f"{path}: line {line} is not a number; fix or remove that line (is this a rating file?)"
            ) from None
        if not math.isfinite(v):
            raise AnnotationError(
                f"{path}: line {line} holds {v}; give a finite number (a missing rating must be "
                "filled, e.g. with the previous value)"
            )
        if value_range is not None and _outside(v, value_range):
            raise AnnotationError(f"{path}: line {line} holds {v:g}, {_scale_fix(value_range)}")
        out[i] = v
    return out.astype(np.float32)


#: separates a target from its rater in a label key (``valence@r1``), as in manifest columns
RATER_SEP = "@"


@dataclass(frozen=True)
class TimedRating:
    """A rating sampled at its own times (seconds, increasing), from a ``time,<value>`` CSV."""

    path: Path
    time: np.ndarray
    values: np.ndarray

    def on_frames(self, n_frames: int, fps: float) -> np.ndarray:
        """The rating linearly interpolated at frame times ``k / fps`` (k < ``n_frames``), NaN
        outside the rated span, as float32."""
        t = np.arange(n_frames, dtype=np.float64) / fps
        out = np.interp(t, self.time, self.values)
        out[(t < self.time[0] - 1e-9) | (t > self.time[-1] + 1e-9)] = np.nan
        return out.astype(np.float32)


def read_label_file(
    path: str | Path, value_range: tuple[float, float] | None = None
) -> np.ndarray | TimedRating:
    """A rating file of either format: the official one (one column, one value per 25 fps frame;
    :func:`read_annotation`) or a two-column CSV with header ``time,<name>`` (seconds at any rate,
    increasing; returned as a :class:`TimedRating` to resample onto the session's frames).
    Values are in the target's own units: any finite number, within ``value_range`` when the
    target's scale is declared.

    Errors (:class:`AnnotationError`) name the file, the line and the column; a header of
    neither format quotes both.
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError) as e:
        raise AnnotationError(f"{path}: cannot be read as a text CSV ({e})") from e
    header = [c.strip() for c in next(csv.reader([first]), [])]
    if len(header) < 2:
        return read_annotation(path, value_range)
    if header[0].lower() != "time" or len(header) != 2 or not header[1]:
        near = nearest(header[0].lower(), ["time"])
        hint = f"; did you mean 'time,{header[1]}'?" if near and len(header) == 2 else ""
        raise AnnotationError(f"{path}: {_shown(header)} is of neither format: {FORMATS}{hint}")
    return _read_timed(path, header, value_range)


def _read_timed(
    path: Path, header: list[str], value_range: tuple[float, float] | None
) -> TimedRating:
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))[1:]
    while rows and not any(c.strip() for c in rows[-1]):
        rows.pop()
    if len(rows) < 2:
        raise AnnotationError(f"{path}: fewer than two rows of values; a rating needs at least two")
    times = np.empty(len(rows))
    values = np.empty(len(rows))
    for i, row in enumerate(rows):
        line = i + 2
        cells = [c.strip() for c in row]
        if len(cells) != 2:
            raise AnnotationError(
                f"{path}: line {line} has {len(cells)} fields; each line is 'time,value'"
            )
        for col, (name, cell) in enumerate(zip(header, cells, strict=True)):
            try:
                v = float(cell)
            except ValueError:
                raise AnnotationError(
                    f"{path}: line {line}, column {col + 1} ({name!r}) is not a number; fix or "
                    "remove that line"
                ) from None
            if not math.isfinite(v):
                raise AnnotationError(
                    f"{path}: line {line}, column {col + 1} ({name!r}) holds {v}; give a finite "
                    "number (leave out the rows that were not rated)"
                )
            (times if col == 0 else values)[i] = v
        if value_range is not None and _outside(values[i], value_range):
            raise AnnotationError(
                f"{path}: line {line}, column 2 ({header[1]!r}) holds {values[i]:g}, "
                + _scale_fix(value_range)
            )
        if i and times[i] <= times[i - 1]:
            raise AnnotationError(
                f"{path}: line {line}, column 1 ('time') is {times[i]} s, not after the line "
                f"before ({times[i - 1]} s); times must increase"
            )
    return TimedRating(path, times, values)


def split_label_key(key: str) -> tuple[str, str | None]:
    """(target, rater or None) of a label key ``target`` or ``target@rater``.

    >>> split_label_key("valence@r1"), split_label_key("arousal")
    (('valence', 'r1'), ('arousal', None))
    """
    target, sep, rater = key.partition(RATER_SEP)
    return target, (rater if sep else None)
