"""``featurestore ratings FILE``: whole-session ratings from a CSV into existing shards
(docs/store.md, whole-session ratings); every problem reported at once, before any write."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..sources.import_errors import DataImportError
from ..sources.manifest_file import read_text_csv
from ..storage.store import Store

NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
MAX_SHOWN = 20


class RatingsTableError(DataImportError):
    """A ratings table that cannot be imported; ``problems`` lists each as ``file: line N, column C: ...``."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        more = f"\n  ... and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
        super().__init__(
            f"{path}: {len(problems)} problem(s) in the ratings table:\n  "
            + "\n  ".join(problems[:MAX_SHOWN])
            + more
            + "\nfix them and re-run; nothing was written (header: session,<target>[,...][,rater])"
        )
        self.path = path
        self.problems = problems


def _name_ok(name: str) -> bool:
    return bool(name) and name[0].isalnum() and set(name) <= NAME_CHARS


def _check_header(header: list[str], fail: Any) -> list[str]:
    """The target columns of a ratings table's header; ``fail(line, column, what)`` for each problem."""
    if "session" not in header:
        fail(1, "session", "missing; the first column names each row's session")
    targets = [h for h in header if h not in ("session", "rater")]
    if not targets:
        fail(1, "<target>", "no target column; add one column per rating, e.g. session,empathy")
    for t in targets:
        if not _name_ok(t):
            fail(1, t, "a target name is letters, digits, '_', '.', '-'")
    for h in sorted(set(header)):
        if header.count(h) > 1:
            fail(1, h, "named twice in the header")
    return targets


def _numbers(line: int, row: dict[str, str], targets: list[str], fail: Any) -> dict[str, float]:
    """Target -> the row's number (empty cells left out); ``fail`` for a cell that is not one."""
    out = {}
    for t in (t for t in targets if row.get(t, "") != ""):
        try:
            out[t] = float(row[t])
        except ValueError:
            out[t] = math.nan
        if not math.isfinite(out[t]):
            del out[t]
            fail(line, t, f"{row[t]!r} is not a number")
    return out


def read_ratings_table(path: str | Path) -> dict[str, dict[str, dict[str, float]]]:
    """session -> target -> rater -> rating of a ratings CSV (rater ``""`` without a ``rater``
    column); every problem of the table at once in a :class:`RatingsTableError`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ratings table {path} does not exist; check the path")
    header, lines = read_text_csv(path, RatingsTableError)
    problems: list[str] = []

    def fail(line: int, column: str, what: str) -> None:
        problems.append(f"{path}: line {line}, column {column!r}: {what}")

    targets = _check_header(header, fail)
    if problems:
        raise RatingsTableError(path, problems)
    out: dict[str, dict[str, dict[str, float]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for n, cells in enumerate(lines[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) > len(header):
            fail(n, header[-1], f"{len(cells)} fields but the header names {len(header)} columns")
            continue
        row = {h: c.strip() for h, c in zip(header, cells, strict=False)}
        session, rater = row.get("session", ""), row.get("rater", "")
        if not session:
            fail(n, "session", "empty; every row names its session")
            continue
        if "rater" in header and not _name_ok(rater):
            fail(n, "rater", f"{rater!r}: a rater name is letters, digits, '_', '.', '-'")
            continue
        if (session, rater) in seen:
            who = f" and rater {rater!r}" if rater else ""
            fail(n, "session", f"{session!r}{who} repeats line {seen[session, rater]}")
            continue
        seen[session, rater] = n
        for t, number in _numbers(n, row, targets, fail).items():
            out.setdefault(session, {}).setdefault(t, {})[rater] = number
    if problems:
        raise RatingsTableError(path, problems)
    return out


@dataclass
class RatingsReport:
    """What :func:`import_ratings` did: sessions written, and those already current."""

    written: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)


def import_ratings(
    path: str | Path, store_root: str | Path, progress: bool = False
) -> RatingsReport:
    """Store the ratings of the table at ``path`` (:func:`read_ratings_table`) in the shards of
    ``store_root`` as ``/session_labels/<target>``; a session without a shard is a
    :class:`RatingsTableError` (nothing is written)."""
    path, table = Path(path), read_ratings_table(path)
    store = Store(store_root, mode="a")
    have = set(store.list_sessions())
    missing = [s for s in table if s not in have]
    if missing:
        known = ", ".join(sorted(have)[:5]) + (" ..." if len(have) > 5 else "") or "none"
        raise RatingsTableError(
            path,
            [
                f"{path}: column 'session': {s!r} has no shard in {store_root} (sessions there: "
                f"{known}); extract it first or correct the name"
                for s in missing
            ],
        )
    report = RatingsReport(targets=sorted({t for r in table.values() for t in r}))
    source = {"kind": "table", "file": str(path)}
    for session, ratings in tqdm(
        table.items(), desc="ratings", unit="session", disable=not progress
    ):
        stored = store.session_ratings(session)
        changed = {t: r for t, r in ratings.items() if stored.get(t) != r}
        if not changed:
            report.current.append(session)
            continue
        store.write_session_labels(session, changed, source)
        report.written.append(session)
    return report
