"""A corpus manifest: one row per session, for recordings not named like OMG-Empathy's.

``featurestore scan --manifest FILE`` (or ``manifest: FILE`` in ``featurestore.yaml``) reads a
CSV or YAML file instead of looking for ``Subject_<L>_Story_<S>`` names; paths are relative to
the manifest's folder. The columns and how ids become the shard's attributes: docs/store.md
(manifests). Every error names the manifest, the row (its line) and the column, and all of a
manifest's errors are reported at once (:class:`ManifestError`).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import nearest
from ..storage.roles import store_key
from ..yaml_loader import StrictLoader
from .import_errors import DataImportError
from .label_checks import parse_min_coverage, parse_targets

REQUIRED = ("session", "person", "group")
MEDIA = ("video", "video_person", "video_partner", "audio", "audio_person", "audio_partner")
OPTIONAL = ("partner", "split", "fold", "split_x", "transcript", *MEDIA)
LABEL_PREFIX = "label_"
RATING_PREFIX = "rating_"
#: ``rating_<target>@<rater>``: a target and a rater name of letters, digits, ``_ . -``
RATING_COLUMN = re.compile(
    r"^rating_([A-Za-z0-9][A-Za-z0-9_.-]*)(?:@([A-Za-z0-9][A-Za-z0-9_.-]*))?$"
)
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
IMPORT_PREFIX = "import_"
#: ``import_<role>_<channel>``: a per-frame table computed elsewhere (OpenFace, py-feat, a CSV
#: with a time column), stored as that role's channel (person, partner or scene)
IMPORT_COLUMN = re.compile(r"^import_(person|partner|scene)_([A-Za-z0-9][A-Za-z0-9_.-]*)$")
#: the column families a prefix names: prefix -> (the pattern a column must match, the error)
PATTERNED_COLUMNS = {
    IMPORT_PREFIX: (
        IMPORT_COLUMN,
        "expected import_<role>_<channel>: role person, partner or scene, a channel name of "
        "letters, digits, '_', '.', '-'",
    ),
    RATING_PREFIX: (
        RATING_COLUMN,
        "expected rating_<target> or rating_<target>@<rater>, names of letters, digits, '_', '.', '-'",
    ),
}
#: errors shown in one :class:`ManifestError` before "and N more"
MAX_SHOWN = 20


class ManifestError(DataImportError):
    """A manifest that cannot be used; ``problems`` lists each as ``file: row N (line L), column C: ...``."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        shown = problems[:MAX_SHOWN]
        more = f"\n  ... and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
        super().__init__(
            f"{path}: {len(problems)} problem(s) in the manifest:\n  "
            + "\n  ".join(shown)
            + more
            + "\nfix them and re-run (the columns are described in `featurestore scan --help`)"
        )
        self.path = path
        self.problems = problems


@dataclass
class ManifestRow:
    """One session of a manifest, its paths resolved against the manifest's folder."""

    row: int  #: 1-based index among the sessions
    line: int  #: line in the file
    session: str
    person: str
    group: str
    partner: str = ""
    split: str = "unassigned"
    fold: str = ""
    split_x: int | None = None
    media: dict[str, Path] = field(default_factory=dict)  #: column (``video``, ...) -> file
    #: target (``valence``) or target and rater (``valence@r1``) -> rating file
    labels: dict[str, Path] = field(default_factory=dict)
    transcript: Path | None = None
    #: whole-session ratings: target -> rater -> value (rater ``""``: ``rating_<target>``)
    ratings: dict[str, dict[str, float]] = field(default_factory=dict)
    #: imported per-frame tables: the store's channel key (``listener/openface``) -> file
    imports: dict[str, Path] = field(default_factory=dict)


def read_manifest(path: str | Path, allow_outside: bool = False) -> list[ManifestRow]:
    """The sessions of a CSV (``.csv``) or YAML (``.yaml``/``.yml``) manifest, checked; every file
    it names must be inside the manifest's folder (symbolic links and ``..`` resolved) unless
    ``allow_outside`` (``--allow-outside-paths``), so a manifest cannot make the tools read, and
    quote, files elsewhere on the machine. A :class:`ManifestError` lists every problem, each
    naming the file, the row (and its line) and the column."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"manifest {path} does not exist; check the --manifest path")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        raw = _read_csv(path)
    elif suffix in (".yaml", ".yml"):
        raw = _read_yaml(path)
    else:
        raise ManifestError(
            path, [f"{path}: a manifest is a .csv or .yaml file, not {suffix or 'no suffix'}"]
        )
    checker = _Checker(path, allow_outside)
    rows = [checker.row(i + 1, line, values) for i, (line, values) in enumerate(raw)]
    if not raw:
        checker.problems.append(f"{path}: no sessions; add one row per session")
    if checker.problems:
        raise ManifestError(path, checker.problems)
    return [r for r in rows if r is not None]


#: the keys of a YAML manifest's top-level mapping besides ``sessions``
DECLARATIONS = ("targets", "min_coverage")


def read_manifest_declarations(
    path: str | Path,
) -> tuple[dict[str, tuple[float, float]], float | None]:
    """(target -> declared scale, ``min_coverage`` or None) of a YAML manifest written as a
    mapping (``targets: {valence: {scale: [1, 9]}}``, ``min_coverage: 0.8``, ``sessions: [...]``);
    nothing for a CSV manifest or a bare list (declare them in featurestore.yaml)."""
    path = Path(path)
    if path.suffix.lower() not in (".yaml", ".yml"):
        return {}, None
    data = yaml.safe_load(path.read_text(encoding="utf-8"))  # read_manifest parsed it already
    if not isinstance(data, Mapping):
        return {}, None
    unknown = [str(k) for k in data if k not in ("sessions", *DECLARATIONS)]
    if unknown:
        known = ", ".join(("sessions", *DECLARATIONS))
        raise ManifestError(
            path, [f"{path}: unknown top-level key(s) {unknown}; a manifest's keys are {known}"]
        )
    try:
        return (
            parse_targets(data.get("targets"), str(path)),
            parse_min_coverage(data.get("min_coverage"), str(path)),
        )
    except ValueError as e:
        raise ManifestError(path, [str(e)]) from e


def read_text_csv(
    path: Path, error: Callable[[Path, list[str]], Exception]
) -> tuple[list[str], list[list[str]]]:
    """(the header's names stripped, every line's cells) of a CSV file in UTF-8 (a byte-order
    mark allowed); ``error(path, [message])`` raised when it cannot be read or is empty."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            lines = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise error(path, [f"{path}: cannot be read as a text CSV ({e})"]) from e
    if not lines:
        raise error(path, [f"{path}: empty; the first line names the columns"])
    return [c.strip() for c in lines[0]], lines


def _read_csv(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line, column -> value) of each non-blank row of a CSV manifest."""
    header, lines = read_text_csv(path, ManifestError)
    out = []
    for n, cells in enumerate(lines[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) > len(header):
            raise ManifestError(
                path,
                [
                    f"{path}: line {n} has {len(cells)} fields but the header names {len(header)} "
                    "columns; quote values that hold commas"
                ],
            )
        out.append((n, {h: c.strip() for h, c in zip(header, cells, strict=False) if h}))
    return out


class _LineLoader(StrictLoader):
    """A YAML loader that records each mapping's line under ``__line__`` (and refuses what
    :class:`~featurestore.yaml_loader.StrictLoader` refuses: repeated keys, alias bombs)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line, key -> value) of each session of a YAML manifest (a list, or a ``sessions:`` one)."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LineLoader)
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(path, [f"{path}: cannot be read ({e})"]) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        # the problem only: the error's own text quotes the file's lines around it
        what = getattr(e, "problem", None) or type(e).__name__
        raise ManifestError(path, [f"{path}: {where}: malformed YAML ({what})"]) from e
    if isinstance(data, Mapping):
        data = data.get("sessions")
    if not isinstance(data, list):
        raise ManifestError(
            path, [f"{path}: expected a list of sessions (or `sessions:` holding one)"]
        )
    out = []
    for i, entry in enumerate(data, start=1):
        if not isinstance(entry, Mapping):
            raise ManifestError(path, [f"{path}: session {i}: expected a mapping of columns"])
        entry = dict(entry)
        line = int(entry.pop("__line__", 0))
        _flatten(entry, "labels", LABEL_PREFIX)
        _flatten(entry, "ratings", RATING_PREFIX)
        out.append((line, {str(k): "" if v is None else str(v).strip() for k, v in entry.items()}))
    return out


def _flatten(entry: dict[str, Any], key: str, prefix: str) -> None:
    """A YAML session's ``labels:`` or ``ratings:`` mapping (``target: value`` or ``target:
    {rater: value}``) as ``<prefix><target>`` / ``<prefix><target>@<rater>`` keys, in place."""
    given = entry.pop(key, None)
    if not isinstance(given, Mapping):
        if given is not None:
            entry[key] = given  # reported as a bad column
        return
    for target, value in given.items():
        if target == "__line__":
            continue
        if isinstance(value, Mapping):
            entry.update({f"{prefix}{target}@{r}": v for r, v in value.items() if r != "__line__"})
        else:
            entry[f"{prefix}{target}"] = value


class _Checker:
    """Checks rows of one manifest, collecting every problem."""

    def __init__(self, path: Path, allow_outside: bool = False) -> None:
        self.path = path
        self.base = path.parent
        self.allow_outside = allow_outside
        self.problems: list[str] = []
        self.seen: dict[str, int] = {}

    def fail(self, row: int, line: int, column: str, what: str) -> None:
        at = f"row {row} (line {line})" if line else f"row {row}"
        self.problems.append(f"{self.path}: {at}, column {column!r}: {what}")

    def file(self, row: int, line: int, column: str, value: str) -> Path | None:
        p = Path(value)
        p = p if p.is_absolute() else self.base / p
        if not self.allow_outside and not p.resolve().is_relative_to(self.base.resolve()):
            why = (
                f"{value} is outside the manifest's folder {self.base}; keep the corpus's files "
                "under it, or pass --allow-outside-paths to read files elsewhere"
            )
        elif not p.is_file():
            why = f"no file {p}; paths are relative to the manifest's folder"
        else:
            return p
        self.fail(row, line, column, why)
        return None

    def row(self, row: int, line: int, values: Mapping[str, str]) -> ManifestRow | None:
        """Row ``row`` as a :class:`ManifestRow`; None, with its problems, when it cannot be used."""
        self.columns(row, line, values)
        n = len(self.problems)
        for col in REQUIRED:
            if not values.get(col):
                self.fail(row, line, col, "empty or missing; every session needs it")
        self._check_id(row, line, values.get("session", ""))
        get = values.get
        out = ManifestRow(row, line, get("session", ""), get("person", ""), get("group", ""))
        out.partner, out.fold = get("partner", ""), get("fold", "")
        out.split = get("split", "") or "unassigned"
        if values.get("split_x"):
            try:
                out.split_x = int(values["split_x"])
            except ValueError:
                self.fail(
                    row, line, "split_x", f"{values['split_x']!r} is not a whole number of pixels"
                )
        self._files(out, values)
        self._ratings(out, values)
        self._check_media(row, line, values)
        return out if len(self.problems) == n else None

    def columns(self, row: int, line: int, values: Mapping[str, str]) -> None:
        """Unknown columns, each with the nearest known name."""
        known = [*REQUIRED, *OPTIONAL]
        for col in values:
            family = next((p for p in PATTERNED_COLUMNS if col.startswith(p)), None)
            if family is not None:
                pattern, expected = PATTERNED_COLUMNS[family]
                if not pattern.match(col):
                    self.fail(row, line, col, expected)
                continue
            if col not in known and not (
                col.startswith(LABEL_PREFIX) and len(col) > len(LABEL_PREFIX)
            ):
                near = nearest(col, [*known, "label_<target>", "label_<target>@<rater>"])
                hint = (
                    f"; did you mean {near!r}?"
                    if near
                    else f"; known: {', '.join(known)}, label_<target>, label_<target>@<rater>"
                )
                self.fail(row, line, col, f"unknown column{hint}")

    def _check_id(self, row: int, line: int, sid: str) -> None:
        """A session id of the allowed characters, not seen in an earlier row."""
        if sid and not SESSION_ID.match(sid):
            self.fail(
                row, line, "session", f"{sid!r} is not an id of letters, digits, '_', '.', '-'"
            )
        elif sid in self.seen:
            self.fail(row, line, "session", f"{sid!r} repeats row {self.seen[sid]}; ids are unique")
        elif sid:
            self.seen[sid] = row

    def _files(self, out: ManifestRow, values: Mapping[str, str]) -> None:
        """The row's media, rating and transcript files, each checked to exist."""
        row, line = out.row, out.line
        for col in MEDIA:
            if values.get(col) and (p := self.file(row, line, col, values[col])) is not None:
                out.media[col] = p
        for col, value in values.items():
            if col.startswith(LABEL_PREFIX) and value:
                key = col[len(LABEL_PREFIX) :]
                target, sep, rater = key.partition("@")
                if sep and not (SESSION_ID.match(target) and SESSION_ID.match(rater)):
                    why = "a per-rater column is label_<target>@<rater>, each a name of letters, digits, '_', '.', '-'"
                    self.fail(row, line, col, why)
                elif sep and values.get(f"{LABEL_PREFIX}{target}"):
                    why = (
                        f"give label_{target} or per-rater label_{target}@<rater> files, not both "
                    )
                    why += "(the raters' mean becomes the target's labels)"
                    self.fail(row, line, col, why)
                elif (p := self.file(row, line, col, value)) is not None:
                    out.labels[key] = p
        if values.get("transcript"):
            out.transcript = self.file(row, line, "transcript", values["transcript"])
        for col, value in values.items():
            m = IMPORT_COLUMN.match(col)
            if m and value and m.group(1) == "partner" and not values.get("partner"):
                self.fail(row, line, "partner", f"empty but {col} is given; name the partner")
            elif m and value and (p := self.file(row, line, col, value)) is not None:
                out.imports[store_key(f"{m.group(1)}/{m.group(2)}")] = p

    def _ratings(self, out: ManifestRow, values: Mapping[str, str]) -> None:
        """The row's whole-session ratings, each a finite number (an empty cell: no rating)."""
        row, line = out.row, out.line
        for col, value in values.items():
            m = RATING_COLUMN.match(col)
            if not m or value == "":
                continue
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                why = f"{value!r} is not a number; a rating is one number per session"
                self.fail(row, line, col, why)
                continue
            out.ratings.setdefault(m.group(1), {})[m.group(2) or ""] = number
        for target, by_rater in out.ratings.items():
            if "" in by_rater and len(by_rater) > 1:
                why = f"given beside per-rater columns rating_{target}@<rater>; give one or the other "
                why += "(the stored rating is the mean over raters)"
                self.fail(row, line, f"{RATING_PREFIX}{target}", why)

    def _check_media(self, row: int, line: int, values: Mapping[str, str]) -> None:
        per_role = [c for c in ("video_person", "video_partner") if values.get(c)]
        if values.get("video") and per_role:
            why = "give one shared `video` or a video per role, not both"
            self.fail(row, line, per_role[0], why)
        if not any(values.get(c) for c in MEDIA):
            self.fail(row, line, "video", f"no media; give one of {', '.join(MEDIA)}")
        for col in ("video_partner", "audio_partner"):
            if values.get(col) and not values.get("partner"):
                self.fail(row, line, "partner", f"empty but {col} is given; name the partner")
        if values.get("split_x") and not values.get("video"):
            self.fail(row, line, "split_x", "a crop boundary needs a shared `video`")


def id_numbers(ids: list[str]) -> dict[str, int]:
    """Each id's integer for the shard's ``listener``/``story``/``speaker`` attributes: the id
    itself when every id is an integer, else its rank in sorted order from 1.

    >>> id_numbers(["12", "3"]), id_numbers(["b", "a", "b"])
    ({'3': 3, '12': 12}, {'a': 1, 'b': 2})
    """
    unique = sorted(set(ids))
    if all(re.fullmatch(r"\d+", i) for i in unique):
        return {i: int(i) for i in sorted(unique, key=int)}
    return {i: n for n, i in enumerate(unique, start=1)}
