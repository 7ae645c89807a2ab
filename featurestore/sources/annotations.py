"""Official per-frame annotation CSVs (valence), read and checked.

The format of OMG-Empathy's ratings: a single header line (``valence``, or any single column
name such as the target's) and one value in [-1, 1] per video frame at 25 fps. Used by
``featurestore labels`` (:func:`featurestore.extraction.imports.import_labels`) and by extraction, whose
labels define a session's frame count.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from .import_errors import DataImportError


class AnnotationError(DataImportError):
    """An annotation CSV is malformed: names the file, the row and what to do."""


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
        raise AnnotationError(
            f"{path}: the file is empty; it needs a header line such as 'valence' and one value per frame"
        )
    header = [c.strip() for c in rows[0]]
    if len(header) != 1 or not header[0]:
        raise AnnotationError(
            f"{path}: header {rows[0]} should be one column name such as 'valence'; one column per file"
        )
    try:
        float(header[0])
    except ValueError:
        pass
    else:
        raise AnnotationError(
            f"{path}: the first line is the number {header[0]}, not a column name; add a header line 'valence'"
        )
    if len(rows) == 1:
        raise AnnotationError(
            f"{path}: only a header, no values; the file needs one value per frame"
        )
    lo, hi = value_range
    out = np.empty(len(rows) - 1, dtype=np.float64)
    for i, row in enumerate(rows[1:]):
        line = i + 2
        cells = [c.strip() for c in row]
        if len(cells) != 1:
            raise AnnotationError(
                f"{path}: line {line} has {len(cells)} fields {row}; the format has one value per line"
            )
        try:
            v = float(cells[0])
        except ValueError:
            raise AnnotationError(
                f"{path}: line {line} holds {cells[0]!r}, not a number; fix or remove that line"
            ) from None
        if not math.isfinite(v) or v < lo - 1e-6 or v > hi + 1e-6:
            raise AnnotationError(
                f"{path}: line {line} holds {v}, outside [{lo}, {hi}]; fix the value (a missing rating "
                "must be filled, e.g. with the previous value)"
            )
        out[i] = v
    return out.astype(np.float32)
