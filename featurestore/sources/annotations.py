"""Rating files (the official per-frame CSV or ``time,<name>``, docs/corpus.md), read and
checked against a declared scale (:mod:`featurestore.sources.label_checks`).
"""

from __future__ import annotations

import csv
import math
import re
from array import array
from collections.abc import Iterator
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


def _scale_problem(v: float, value_range: tuple[float, float] | None) -> str:
    """Why ``v`` lies outside ``value_range`` ("" inside it, or without a declared scale)."""
    if value_range is None:
        return ""
    lo, hi = value_range
    if not (v < lo - 1e-6 or v > hi + 1e-6):
        return ""
    return (
        f"outside the declared scale [{lo:g}, {hi:g}]; fix the value, or the target's scale "
        "(`targets: {<target>: {scale: [lo, hi]}}` in featurestore.yaml or the manifest)"
    )


#: the largest rating file read, in MiB (at 25 fps, over 80 hours of one-column values): a
#: file is read a row at a time, so reading one costs about 8 bytes per value
MAX_LABEL_MIB = 64


def _rows(path: Path) -> Iterator[list[str]]:
    """The CSV rows of ``path``, one at a time, without trailing blank ones; a file over
    :data:`MAX_LABEL_MIB` is refused before it is read."""
    try:
        size = path.stat().st_size
        if size > MAX_LABEL_MIB * 2**20:
            raise AnnotationError(
                f"{path}: {size / 2**20:.1f} MiB, over the {MAX_LABEL_MIB} MiB a rating file may "
                "hold; resample it to a lower rate (a 'time,<name>' file) or split the recording"
            )
        with open(path, newline="", encoding="utf-8-sig") as f:
            blank: list[list[str]] = []  # blank rows, kept while a row may follow
            for row in csv.reader(f):
                if not any(c.strip() for c in row):
                    blank.append(row)
                    continue
                yield from blank
                blank.clear()
                yield row
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise AnnotationError(f"{path}: cannot be read as a text CSV ({e})") from e


_NAME = r"[A-Za-z_][\w@. -]{0,30}"
_HEADER_LIKE = re.compile(rf"{_NAME}(,{_NAME}){{0,3}}")


def shown_header(header: list[str]) -> str:
    """``header 'a,b'`` when it reads as a rating file's column names, else only its field count
    (a file of another kind is never quoted)."""
    text = ",".join(header)
    if _HEADER_LIKE.fullmatch(text):
        return f"header {text!r}"
    return f"its header ({len(header)} fields)"


def read_annotation(path: str | Path, value_range: tuple[float, float] | None = None) -> np.ndarray:
    """Per-frame values (float32) of an annotation CSV in the official format (a header, then
    one number per 25 fps frame); a value that is not a finite number, or is outside
    ``value_range`` (the target's declared scale; None: any), raises :class:`AnnotationError`
    with the file and line."""
    path = Path(path)
    rows = _rows(path)
    return _read_column(path, next(rows, None), rows, value_range)


def _read_column(
    path: Path,
    first: list[str] | None,
    rows: Iterator[list[str]],
    value_range: tuple[float, float] | None,
) -> np.ndarray:
    if first is None:
        raise AnnotationError(
            f"{path}: the file is empty; it needs a header line such as 'valence' and one value per frame"
        )
    header = [c.strip() for c in first]
    if len(header) != 1 or not header[0]:
        raise AnnotationError(
            f"{path}: {shown_header(header)} is not one column name such as 'valence'; {FORMATS}"
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
    out = array("d")
    for line, row in enumerate(rows, start=2):
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
        if why := _scale_problem(v, value_range):
            raise AnnotationError(f"{path}: line {line} holds {v:g}, {why}")
        out.append(v)
    if not out:
        raise AnnotationError(
            f"{path}: only a header, no values; the file needs one value per frame"
        )
    return np.frombuffer(out).astype(np.float32)


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
    """A rating file of either format (:data:`FORMATS`): one column (:func:`read_annotation`)
    or ``time,<name>`` (a :class:`TimedRating` to resample onto the session's frames); values
    within ``value_range`` when the target's scale is declared. Errors
    (:class:`AnnotationError`) name the file, the line and the column."""
    path = Path(path)
    rows = _rows(path)
    first = next(rows, None)
    header = [c.strip() for c in first or []]
    if len(header) < 2:
        return _read_column(path, first, rows, value_range)
    if header[0].lower() != "time" or len(header) != 2 or not header[1]:
        near = nearest(header[0].lower(), ["time"])
        hint = f"; did you mean 'time,{header[1]}'?" if near and len(header) == 2 else ""
        raise AnnotationError(
            f"{path}: {shown_header(header)} is of neither format: {FORMATS}{hint}"
        )
    return _read_timed(path, header, rows, value_range)


def _read_timed(
    path: Path,
    header: list[str],
    rows: Iterator[list[str]],
    value_range: tuple[float, float] | None,
) -> TimedRating:
    times, values = array("d"), array("d")
    for line, row in enumerate(rows, start=2):
        cells = [c.strip() for c in row]
        if len(cells) != 2:
            raise AnnotationError(
                f"{path}: line {line} has {len(cells)} fields; each line is 'time,value'"
            )
        t, v = (
            _timed_cell(path, line, col, name, cell)
            for col, (name, cell) in enumerate(zip(header, cells, strict=True))
        )
        if why := _scale_problem(v, value_range):
            raise AnnotationError(
                f"{path}: line {line}, column 2 ({header[1]!r}) holds {v:g}, {why}"
            )
        if times and t <= times[-1]:
            raise AnnotationError(
                f"{path}: line {line}, column 1 ('time') is {t} s, not after the line "
                f"before ({times[-1]} s); times must increase"
            )
        times.append(t)
        values.append(v)
    if len(times) < 2:
        raise AnnotationError(f"{path}: fewer than two rows of values; a rating needs at least two")
    return TimedRating(path, np.frombuffer(times), np.frombuffer(values))


def _timed_cell(path: Path, line: int, col: int, name: str, cell: str) -> float:
    """The number in column ``col`` (0-based, named ``name``) of a ``time,<name>`` file's line."""
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
    return v


def split_label_key(key: str) -> tuple[str, str | None]:
    """(target, rater or None) of a label key ``target`` or ``target@rater``.

    >>> split_label_key("valence@r1"), split_label_key("arousal")
    (('valence', 'r1'), ('arousal', None))
    """
    target, sep, rater = key.partition(RATER_SEP)
    return target, (rater if sep else None)
