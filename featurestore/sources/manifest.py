"""Session discovery: the OMG-Empathy layout (the default: files matched by their
``Subject_<L>_Story_<S>`` names, docs/corpus.md) or a manifest of any corpus
(:mod:`featurestore.sources.manifest_file`).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..files import write_atomic
from ..storage.layouts import DEFAULT_LAYOUT, MANIFEST
from ..storage.store import parse_session, session_name
from .annotations import shown_header
from .label_checks import check_session_labels
from .manifest_file import id_numbers, read_manifest, read_manifest_declarations

VIDEO_EXTS = (".mp4", ".avi", ".mkv", ".mov")
TRANSCRIPT_EXTS = (".srt", ".ass")
TABLE_EXTS = (".csv",)

#: Story -> speaker in the OMG-Empathy corpus (stories 1-2 speaker 1, 3-4 speaker 2, ...).
STORY_SPEAKER: dict[int, int] = {1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3, 7: 4, 8: 4}
#: The official split by story.
SPLITS: dict[str, list[int]] = {"train": [2, 4, 5, 8], "val": [1], "test": [3, 6, 7]}
#: The OMG-Empathy layout's targets and their declared scale: its valence is rated in [-1, 1]
#: (``targets:`` in featurestore.yaml may declare others; :mod:`.label_checks`).
OMG_SCALES: dict[str, list[float]] = {
    "valence_self": [-1.0, 1.0],
    "valence_observer_listener": [-1.0, 1.0],
    "valence_observer_speaker": [-1.0, 1.0],
}


def story_split(story: int, splits: Mapping[str, list[int]] = SPLITS) -> str:
    """Split name of a story, ``"unassigned"`` when no split lists it."""
    for name, stories in splits.items():
        if int(story) in [int(s) for s in stories]:
            return name
    return "unassigned"


@dataclass
class SessionFiles:
    """Everything found for one session."""

    session: str
    listener: int
    story: int
    speaker: int
    split: str
    video: Path | None = None
    annotations: dict[str, Path] = field(default_factory=dict)  # target -> csv
    transcript: Path | None = None
    #: the name of its corpus layout (:mod:`featurestore.storage.layouts`): OMG-Empathy's
    #: (found by name) or a manifest's (a row of one)
    layout: str = DEFAULT_LAYOUT.name
    #: the manifest's ids as written (empty in the OMG layout, whose ids are the integers)
    person: str = ""
    group: str = ""
    partner: str = ""
    fold: str = ""
    #: per-role media and a shared audio file of a manifest: column (``video_person``,
    #: ``audio_partner``, ``audio``, ...) -> file
    media: dict[str, Path] = field(default_factory=dict)
    #: this session's crop boundary in pixels (None: the config's ``split_x``)
    split_x: int | None = None
    #: whole-session ratings of a manifest: target -> rater -> value (rater ``""``: no rater),
    #: and the manifest they come from (the ``source`` of ``/session_labels``)
    ratings: dict[str, dict[str, float]] = field(default_factory=dict)
    ratings_source: str = ""
    #: a manifest's imported per-frame tables: the store's channel key -> file
    imports: dict[str, Path] = field(default_factory=dict)
    #: declared scales, target -> [low, high] in the ratings' own units (an undeclared target
    #: takes any finite value), and the share of the recording a rating file must cover (None:
    #: :data:`~.label_checks.DEFAULT_MIN_COVERAGE`)
    scales: dict[str, list[float]] = field(default_factory=dict)
    min_coverage: float | None = None

    def to_record(self) -> dict:
        d = asdict(self)
        for key in ("video", "transcript"):
            d[key] = str(d[key] or "")
        for key in ("annotations", "media", "imports"):
            d[key] = {k: str(v) for k, v in d[key].items()}
        return d

    @classmethod
    def from_record(cls, r: Mapping) -> SessionFiles:
        """The session of a record of :meth:`to_record` (written by ``featurestore scan``; older
        records without the manifest fields read as the OMG layout)."""
        return cls(
            session=r["session"],
            listener=int(r["listener"]),
            story=int(r["story"]),
            speaker=int(r["speaker"]),
            split=r["split"],
            video=Path(r["video"]) if r.get("video") else None,
            annotations={k: Path(v) for k, v in r.get("annotations", {}).items()},
            transcript=Path(r["transcript"]) if r.get("transcript") else None,
            layout=r.get("layout", DEFAULT_LAYOUT.name),
            person=str(r.get("person", "")),
            group=str(r.get("group", "")),
            partner=str(r.get("partner", "")),
            fold=str(r.get("fold", "")),
            media={k: Path(v) for k, v in r.get("media", {}).items()},
            split_x=r.get("split_x"),
            ratings={
                t: {k: float(v) for k, v in by.items()} for t, by in r.get("ratings", {}).items()
            },
            ratings_source=str(r.get("ratings_source", "")),
            imports={k: Path(v) for k, v in r.get("imports", {}).items()},
            scales={t: [float(v) for v in s] for t, s in r.get("scales", {}).items()},
            min_coverage=r.get("min_coverage"),
        )


@dataclass
class ScanIssue:
    path: Path
    kind: str  # duplicate | unmatched | unparsable | invalid (a rating file that cannot be used)
    reason: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.reason}"


@dataclass
class ScanReport:
    sessions: list[SessionFiles]
    issues: list[ScanIssue]

    def by_session(self) -> dict[str, SessionFiles]:
        return {s.session: s for s in self.sessions}

    def duplicates(self) -> dict[str, list[Path]]:
        """Session -> its files reported as duplicates."""
        out: dict[str, list[Path]] = defaultdict(list)
        for i in self.issues:
            if i.kind == "duplicate" and (ls := parse_session(i.path.name)):
                out[session_name(*ls)].append(i.path)
        return dict(out)


def annotation_target(path: Path, root: Path) -> str:
    """Label target of an annotation CSV from its path relative to the data folder."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        rel = path
    text = "/".join(p.lower() for p in rel.parts)
    if "observer" in text:
        tail = text.split("observer", 1)[1]
        return "valence_observer_speaker" if "speaker" in tail else "valence_observer_listener"
    return "valence_self"


def _csv_header(path: Path) -> list[str] | None:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            row = next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return [c.strip().lower() for c in row] if row else None


def scan(
    data_dir: str | Path | None,
    story_speaker: Mapping[int, int] | None = None,
    splits: Mapping[str, list[int]] | None = None,
    manifest: str | Path | None = None,
    allow_outside: bool = False,
) -> ScanReport:
    """The sessions of ``manifest`` (:func:`scan_manifest`; ``data_dir``, ``story_speaker`` and
    ``splits`` do not apply), or else those found under ``data_dir`` in the OMG-Empathy layout:
    every session with a video, annotation or transcript, and an issue for each duplicate,
    unmatched (an annotation or transcript with no video; a video with other ratings but no
    self-rating; one with none is a blind test's, predict only) or
    unparsable file (no ``Subject_<L>_Story_<S>`` name, a story with no speaker mapping, a CSV
    without a ``valence`` header). A file or folder whose real path leaves ``data_dir`` is
    refused unless ``allow_outside`` (:func:`corpus_files`)."""
    if manifest is not None:
        return scan_manifest(manifest, allow_outside)
    if data_dir is None:
        raise FileNotFoundError("give a data folder or a manifest (--manifest FILE)")
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"data folder {root} does not exist; pass the folder holding the Subject_<L>_Story_<S> videos"
        )
    story_speaker = {int(k): int(v) for k, v in (story_speaker or STORY_SPEAKER).items()}
    found = _Found()
    for path in corpus_files(root, VIDEO_EXTS + TRANSCRIPT_EXTS + TABLE_EXTS, allow_outside):
        found.add(path, root, story_speaker)
    sessions = [
        found.session(sid, listener, story, story_speaker[story], splits or SPLITS)
        for sid, (listener, story) in sorted(found.ids.items(), key=lambda kv: kv[1])
    ]
    for sf in sessions:
        sf.scales = {t: list(s) for t, s in OMG_SCALES.items()}
    return ScanReport(sessions, found.issues)


#: files of an outside folder or file named in :func:`corpus_files`' refusal before "and N more"
MAX_OUTSIDE_SHOWN = 3


def corpus_files(root: Path, exts: tuple[str, ...], allow_outside: bool = False) -> list[Path]:
    """The files of extension ``exts`` (any case) under ``root``, hidden folders left out;
    UsageError naming those and the folders whose real path (symbolic links resolved) leaves
    ``root``, unless ``allow_outside`` (then a folder linked from outside is searched too)."""
    real = root.resolve()
    files, outside = [], []
    for path in sorted(root.rglob("*")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        inside = path.resolve().is_relative_to(real)
        if path.is_dir() and not inside:
            if allow_outside:
                files.extend(sorted(p for p in path.rglob("*") if p.is_file()))
            else:
                outside.append(path)
        elif path.is_file() and path.suffix.lower() in exts:
            (files if inside or allow_outside else outside).append(path)
    if outside:
        more = len(outside) - MAX_OUTSIDE_SHOWN
        shown = ", ".join(map(str, outside[:MAX_OUTSIDE_SHOWN])) + (
            f" and {more} more" if more > 0 else ""
        )
        raise UsageError(
            f"{shown}: outside the scanned folder {root} (a symbolic link leaving it); move the "
            "files into the folder, or pass --allow-outside-paths to read files elsewhere"
        )
    return [p for p in files if p.suffix.lower() in exts]


@dataclass
class _Found:
    """What :func:`scan` found so far: each session's files by kind, in order, and the issues."""

    videos: dict[str, list[Path]] = field(default_factory=lambda: defaultdict(list))
    annots: dict[tuple[str, str], list[Path]] = field(default_factory=lambda: defaultdict(list))
    transcripts: dict[str, list[Path]] = field(default_factory=lambda: defaultdict(list))
    ids: dict[str, tuple[int, int]] = field(default_factory=dict)
    issues: list[ScanIssue] = field(default_factory=list)

    def add(self, path: Path, root: Path, story_speaker: Mapping[int, int]) -> None:
        """File ``path`` among its session's videos, transcripts or annotations, or an issue."""
        ext = path.suffix.lower()
        sid = self._session_of(path, ext, story_speaker)
        if sid is None:
            return
        if ext in VIDEO_EXTS:
            self.videos[sid].append(path)
        elif ext in TRANSCRIPT_EXTS:
            self.transcripts[sid].append(path)
        else:
            self._add_csv(path, sid, root)

    def _session_of(self, path: Path, ext: str, story_speaker: Mapping[int, int]) -> str | None:
        """The session a file's name says, or None (an issue for a media file or an unknown story)."""
        ls = parse_session(path.stem)
        if ls is None:
            if ext in VIDEO_EXTS or ext in TRANSCRIPT_EXTS:
                why = "name has no Subject_<L>_Story_<S>; rename it to the corpus pattern"
                self.issues.append(ScanIssue(path, "unparsable", why))
            return None
        listener, story = ls
        if story not in story_speaker:
            why = f"story {story} has no speaker mapping; add it under story_speaker in the config"
            self.issues.append(ScanIssue(path, "unparsable", why))
            return None
        sid = session_name(listener, story)
        self.ids[sid] = ls
        return sid

    def _add_csv(self, path: Path, sid: str, root: Path) -> None:
        """An annotation CSV (a ``valence`` column) of its target; another CSV is a per-frame
        table, reported only when it looks like an annotation."""
        header = _csv_header(path)
        if not header:
            self.issues.append(ScanIssue(path, "unparsable", "not a readable CSV file"))
            return
        if "valence" not in header:
            # Per-frame feature tables (for `featurestore import`) live beside annotations in
            # some layouts; only a CSV that looks like an annotation is reported.
            if len(header) <= 2:
                self.issues.append(
                    ScanIssue(path, "unparsable", f"{shown_header(header)} has no 'valence' column")
                )
            return
        self.annots[(sid, annotation_target(path, root))].append(path)

    def _first(self, paths: list[Path], what: str, sid: str) -> Path | None:
        """The first of a session's ``paths`` of one kind; the others are duplicates."""
        for extra in paths[1:]:
            why = f"second {what} for {sid} (first: {paths[0]}); keep one"
            self.issues.append(ScanIssue(extra, "duplicate", why))
        return paths[0] if paths else None

    def session(
        self, sid: str, listener: int, story: int, speaker: int, splits: Mapping[str, list[int]]
    ) -> SessionFiles:
        """Session ``sid``'s files (the first of each kind; the others and unmatched ones: issues)."""
        sf = SessionFiles(sid, listener, story, speaker, story_split(story, splits))
        sf.video = self._first(self.videos.get(sid, []), "video", sid)
        for (asid, target), paths in self.annots.items():
            if asid == sid:
                if (first := self._first(paths, f"{target} annotation", sid)) is not None:
                    sf.annotations[target] = first
        sf.transcript = self._first(self.transcripts.get(sid, []), "transcript", sid)
        if sf.video is None:
            for p in list(sf.annotations.values()) + ([sf.transcript] if sf.transcript else []):
                self.issues.append(ScanIssue(p, "unmatched", f"no video for {sid}"))
        elif sf.annotations and "valence_self" not in sf.annotations:  # none: a blind test's
            why = (
                f"no self-annotation CSV (header 'valence') for {sid}; a sweep of valence_self "
                "leaves it out (predict only)"
            )
            self.issues.append(ScanIssue(sf.video, "unmatched", why))
        return sf


def scan_manifest(path: str | Path, allow_outside: bool = False) -> ScanReport:
    """The sessions of a manifest file (layout ``manifest``), in its row order."""
    rows = read_manifest(path, allow_outside)
    scales, min_coverage = read_manifest_declarations(path)
    people = id_numbers([r.person for r in rows] + [r.partner for r in rows if r.partner])
    groups = id_numbers([r.group for r in rows])
    sessions = [
        SessionFiles(
            session=r.session,
            listener=people[r.person],
            story=groups[r.group],
            speaker=people[r.partner] if r.partner else 0,
            split=r.split,
            video=r.media.get("video"),
            annotations=dict(r.labels),
            transcript=r.transcript,
            layout=MANIFEST.name,
            person=r.person,
            group=r.group,
            partner=r.partner,
            fold=r.fold,
            media={k: v for k, v in r.media.items() if k != "video"},
            split_x=r.split_x,
            ratings=r.ratings,
            ratings_source=str(path) if r.ratings else "",
            imports=dict(r.imports),
            scales={t: list(s) for t, s in scales.items()},
            min_coverage=min_coverage,
        )
        for r in rows
    ]
    return ScanReport(sessions, [])


def check_labels(report: ScanReport) -> None:
    """An ``invalid`` issue per problem of :func:`~.label_checks.check_session_labels`."""
    for sf in report.sessions:
        for path, problem in check_session_labels(sf):
            reason = problem.removeprefix(f"{path}: ")
            report.issues.append(ScanIssue(path, "invalid", f"{sf.session}: {reason}"))


def read_scan_json(path: str | Path) -> tuple[list[SessionFiles], dict[str, list[Path]]]:
    """The sessions and duplicates (session -> extra files) that ``featurestore scan`` wrote to ``path``."""
    payload = json.loads(Path(path).read_text())
    sessions = [SessionFiles.from_record(r) for r in payload["sessions"]]
    issues = [ScanIssue(Path(i["path"]), i["kind"], i.get("reason", "")) for i in payload["issues"]]
    return sessions, ScanReport(sessions, issues).duplicates()


def write_manifest(report: ScanReport, path: str | Path) -> Path:
    """Write the scan result as JSON (sessions and issues) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "sessions": [s.to_record() for s in report.sessions],
        "issues": [
            {"path": str(i.path), "kind": i.kind, "reason": i.reason} for i in report.issues
        ],
    }
    write_atomic(path, json.dumps(payload, indent=2).encode())
    return path
