"""A corpus manifest: one row per session, for recordings not named like OMG-Empathy's.

``featurestore scan --manifest FILE`` (or ``manifest: FILE`` in ``featurestore.yaml``) reads a
CSV or YAML file instead of looking for ``Subject_<L>_Story_<S>`` names. Each row is one
session; paths are relative to the manifest's folder. Columns (YAML: the same keys, and
``labels:`` may be a mapping ``target: file``):

==================  ===========================================================================
``session``         the session's id (letters, digits, ``_ . -``); its shard is ``<session>.h5``
``person``          the rated person (stored as the ``listener`` role)
``group``           the group or item the session belongs to, e.g. a story or a task
``partner``         optional: the other person of a dyad (stored as the ``speaker`` role)
``split``           optional: ``train``, ``val``, ``test`` or another name (default ``unassigned``)
``fold``            optional: a fold label for cross-validation
``video``           one shared video of both people, cut into crops as for OMG-Empathy
                    (``split_x``, optional, is this session's crop boundary in pixels)
``video_person``,   a video per role (the whole frame is that person), instead of ``video``
``video_partner``
``audio``           optional: the shared microphone, instead of the video's audio track
``audio_person``,   optional: an audio file per role (its own ``<role>/egemaps``)
``audio_partner``
``transcript``      optional: ``.srt``/``.ass`` as in the OMG-Empathy layout
``label_<target>``  a rating file per target (``label_valence``, ``label_arousal``), in the
                    official format: a header line and one value per 25 fps frame
==================  ===========================================================================

Ids are kept as written (``person``, ``group``, ``partner``) in the shard's root attributes
(``layout: manifest``, ``person_id``, ``group_id``, ``partner_id``, ``fold``); the integer
``listener``, ``story`` and ``speaker`` attributes the experiments read are the ids themselves
when every id of that kind is an integer, else their rank in sorted order (1, 2, ...).

Every error names the manifest, the row (its line in the file) and the column, and all of a
manifest's errors are reported at once (:class:`ManifestError`).
"""

from __future__ import annotations

import csv
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .import_errors import DataImportError

REQUIRED = ("session", "person", "group")
MEDIA = ("video", "video_person", "video_partner", "audio", "audio_person", "audio_partner")
OPTIONAL = ("partner", "split", "fold", "split_x", "transcript", *MEDIA)
LABEL_PREFIX = "label_"
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: manifest role -> the store's role (the experiments' names until roles are renamed)
STORE_ROLE = {"person": "listener", "partner": "speaker"}
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
    labels: dict[str, Path] = field(default_factory=dict)  #: target -> rating file
    transcript: Path | None = None


def read_manifest(path: str | Path) -> list[ManifestRow]:
    """The sessions of a CSV (``.csv``) or YAML (``.yaml``/``.yml``) manifest, checked.

    Raises:
        FileNotFoundError: no file at ``path``.
        ManifestError: unknown or missing columns, empty required values, duplicate session
            ids, files that do not exist, a session without media; each problem names the
            file, the row (and its line) and the column.
    """
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
    checker = _Checker(path)
    rows = [checker.row(i + 1, line, values) for i, (line, values) in enumerate(raw)]
    if not raw:
        checker.problems.append(f"{path}: no sessions; add one row per session")
    if checker.problems:
        raise ManifestError(path, checker.problems)
    return [r for r in rows if r is not None]


def _read_csv(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line, column -> value) of each non-blank row of a CSV manifest."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            lines = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(path, [f"{path}: cannot be read as a text CSV ({e})"]) from e
    if not lines:
        raise ManifestError(path, [f"{path}: empty; the first line names the columns"])
    header = [c.strip() for c in lines[0]]
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


class _LineLoader(yaml.SafeLoader):
    """A YAML loader that records each mapping's line under ``__line__``."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line, key -> value) of each session of a YAML manifest: a list of mappings, or a
    mapping with a ``sessions`` list; a ``labels`` mapping becomes ``label_<target>`` keys."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LineLoader)
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(path, [f"{path}: cannot be read ({e})"]) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        raise ManifestError(path, [f"{path}: {where}: malformed YAML ({e})"]) from e
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
        labels = entry.pop("labels", None)
        if isinstance(labels, Mapping):
            entry.update({f"{LABEL_PREFIX}{k}": v for k, v in labels.items() if k != "__line__"})
        elif labels is not None:
            entry["labels"] = labels  # reported as a bad column below
        out.append((line, {str(k): "" if v is None else str(v).strip() for k, v in entry.items()}))
    return out


class _Checker:
    """Checks rows of one manifest, collecting every problem."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.base = path.parent
        self.problems: list[str] = []
        self.seen: dict[str, int] = {}

    def fail(self, row: int, line: int, column: str, what: str) -> None:
        at = f"row {row} (line {line})" if line else f"row {row}"
        self.problems.append(f"{self.path}: {at}, column {column!r}: {what}")

    def file(self, row: int, line: int, column: str, value: str) -> Path | None:
        p = Path(value)
        p = p if p.is_absolute() else self.base / p
        if not p.is_file():
            self.fail(
                row, line, column, f"no file {p}; paths are relative to the manifest's folder"
            )
            return None
        return p

    def row(self, row: int, line: int, values: Mapping[str, str]) -> ManifestRow | None:
        """Row ``row`` (at ``line``) as a :class:`ManifestRow`; None, with its problems, when it
        cannot be used."""
        self.columns(row, line, values)
        n = len(self.problems)
        for col in REQUIRED:
            if not values.get(col):
                self.fail(row, line, col, "empty or missing; every session needs it")
        self._check_id(row, line, values.get("session", ""))
        out = ManifestRow(
            row, line, values.get("session", ""), values.get("person", ""), values.get("group", "")
        )
        out.partner = values.get("partner", "")
        out.split = values.get("split", "") or "unassigned"
        out.fold = values.get("fold", "")
        if values.get("split_x"):
            try:
                out.split_x = int(values["split_x"])
            except ValueError:
                self.fail(
                    row, line, "split_x", f"{values['split_x']!r} is not a whole number of pixels"
                )
        self._files(out, values)
        self._check_media(row, line, values)
        return out if len(self.problems) == n else None

    def columns(self, row: int, line: int, values: Mapping[str, str]) -> None:
        """Unknown columns, each with the nearest known name."""
        known = [*REQUIRED, *OPTIONAL]
        for col in values:
            if (
                col not in known
                and not (col.startswith(LABEL_PREFIX) and len(col) > len(LABEL_PREFIX))
                and not _deferred(col)
            ):
                near = difflib.get_close_matches(col, [*known, "label_<target>"], n=1)
                hint = (
                    f"; did you mean {near[0]!r}?"
                    if near
                    else f"; known: {', '.join(known)}, label_<target>"
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
            if _deferred(col):
                continue
            if col.startswith(LABEL_PREFIX) and value:
                if (p := self.file(row, line, col, value)) is not None:
                    out.labels[col[len(LABEL_PREFIX) :]] = p
        if values.get("transcript"):
            out.transcript = self.file(row, line, "transcript", values["transcript"])

    def _check_media(self, row: int, line: int, values: Mapping[str, str]) -> None:
        per_role = [c for c in ("video_person", "video_partner") if values.get(c)]
        if values.get("video") and per_role:
            self.fail(
                row, line, per_role[0], "give one shared `video` or a video per role, not both"
            )
        if not any(values.get(c) for c in MEDIA):
            self.fail(row, line, "video", f"no media; give one of {', '.join(MEDIA)}")
        if values.get("video_partner") and not values.get("partner"):
            self.fail(row, line, "partner", "empty but video_partner is given; name the partner")
        if values.get("audio_partner") and not values.get("partner"):
            self.fail(row, line, "partner", "empty but audio_partner is given; name the partner")
        if values.get("split_x") and not values.get("video"):
            self.fail(row, line, "split_x", "a crop boundary needs a shared `video`")


def _deferred(column: str) -> bool:
    """A per-rater label (``label_<target>@<rater>``) or whole-session rating
    (``rating_<target>[@<rater>]``) column: accepted and not read yet (the raters' and the session
    ratings' readers store them).

    >>> [_deferred(c) for c in ("label_valence@r1", "rating_engagement", "label_valence", "video")]
    [True, True, False, False]
    """
    return bool(re.fullmatch(r"label_[^@]+@.+|rating_[^@]+(@.+)?", column))


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
