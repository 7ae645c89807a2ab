"""Markdown tables and numbers, as every report writes them (``ablation.md``, ``agreement.md``,
the sweep's and the whole-session study's ``summary.md``).

>>> print("\\n".join(table(["features", "CCC"], [["listener", number(0.4123)], ["speaker", number(None)]])))
| features | CCC |
|---|---|
| listener | 0.412 |
| speaker | n/a |
>>> table(["label"], [["ridge | alpha=1"]])[2]
'| ridge \\\\| alpha=1 |'
>>> interval(0.4123, 0.3, 0.52), interval(0.4123)
('0.412 [0.30, 0.52]', '0.412')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd


def table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table (a ``|`` in a cell escaped)."""
    return [_line(head), "|" + "---|" * len(head), *(_line(r) for r in rows)]


def frame(df: pd.DataFrame) -> list[str]:
    """:func:`table` of a DataFrame: floats with 3 decimals, NaN as an empty cell."""
    return table(
        [str(c) for c in df.columns],
        ([_cell(v) for v in row] for row in df.itertuples(index=False)),
    )


def number(value: Any, digits: int = 3) -> str:
    """A number with ``digits`` decimals, ``n/a`` when missing."""
    return "n/a" if pd.isna(value) else f"{value:.{digits}f}"


def interval(value: Any, low: Any = float("nan"), high: Any = float("nan")) -> str:
    """``value [low, high]`` (3 and 2 decimals), the value alone without both ends."""
    if pd.isna(value):
        return "n/a"
    if pd.notna(low) and pd.notna(high):
        return f"{value:.3f} [{low:.2f}, {high:.2f}]"
    return f"{value:.3f}"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if pd.isna(value) else f"{value:.3f}"
    return str(value)


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
