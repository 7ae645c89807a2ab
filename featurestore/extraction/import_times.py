"""An imported table's timestamps checked against its recording: seconds written in another
unit or at another frame rate (OpenFace with the wrong ``-fps``) cover too little of it.

>>> import numpy as np
>>> print(check_table_times("of.csv", np.arange(180) * 0.001, 18.0, "rec01", "timestamp")[:51])
of.csv: column 'timestamp' steps 0.001 s (1000 Hz):
>>> check_table_times("of.csv", np.arange(180) * 0.1, 18.0, "rec01", "timestamp")
''
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..sources.label_checks import DEFAULT_MIN_COVERAGE

#: the share of its recording an imported table's rows must cover, at their own step
MIN_SHARE = DEFAULT_MIN_COVERAGE
#: the time columns holding seconds a tool wrote (checked); ``frame`` columns are not
TIMESTAMP_COLUMNS = ("timestamp", "time")


def check_table_times(
    path: str | Path, times: np.ndarray, duration_s: float, session: str, column: str
) -> str:
    """The problem of a table whose ``times`` (from its ``column``) step so that its rows cover
    less than :data:`MIN_SHARE` of the recording; ``""`` when they agree or cannot be compared."""
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
