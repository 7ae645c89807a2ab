"""Markdown tables, as the reports write them (``ablation.md``, ``agreement.md``, the sweep summary).

>>> print("\\n".join(table(["features", "CCC"], [["listener", "0.412"], ["speaker", "n/a"]])))
| features | CCC |
|---|---|
| listener | 0.412 |
| speaker | n/a |
>>> table(["label"], [["ridge | alpha=1"]])[2]
'| ridge \\\\| alpha=1 |'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table: the header, the separator, then one line per row (cells as
    text, a ``|`` in a cell escaped so that it does not split the cell)."""
    return [_line(head), "|" + "---|" * len(head), *(_line(r) for r in rows)]


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
