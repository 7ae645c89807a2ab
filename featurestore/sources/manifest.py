"""Session discovery: find OMG-Empathy videos, annotations and transcripts in a folder.

Files are matched by the ``Subject_<L>_Story_<S>`` part of their name, at any depth and
in any case. The target of an annotation CSV is read from its path: a folder or file name
containing ``observer`` marks an observer rating, of the speaker when ``speaker`` appears
too and of the listener otherwise; everything else is the listener's self-rating
(``valence_self``).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..storage.store import parse_session, session_name

VIDEO_EXTS = (".mp4", ".avi", ".mkv", ".mov")
TRANSCRIPT_EXTS = (".srt", ".ass")
TABLE_EXTS = (".csv",)

#: Story -> speaker in the OMG-Empathy corpus (stories 1-2 speaker 1, 3-4 speaker 2, ...).
STORY_SPEAKER: dict[int, int] = {1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3, 7: 4, 8: 4}
#: The official split by story.
SPLITS: dict[str, list[int]] = {"train": [2, 4, 5, 8], "val": [1], "test": [3, 6, 7]}


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

    def to_record(self) -> dict:
        d = asdict(self)
        d["video"] = str(self.video) if self.video else ""
        d["transcript"] = str(self.transcript) if self.transcript else ""
        d["annotations"] = {k: str(v) for k, v in self.annotations.items()}
        return d


@dataclass
class ScanIssue:
    path: Path
    kind: str  # duplicate | unmatched | unparsable
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
        out: dict[str, list[Path]] = defaultdict(list)
        for i in self.issues:
            if i.kind == "duplicate":
                ls = parse_session(i.path.name)
                if ls:
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
    except (OSError, UnicodeDecodeError):
        return None
    return [c.strip().lower() for c in row] if row else None


def scan(  # noqa: C901 - rewritten in the scheduler/extraction change
    data_dir: str | Path,
    story_speaker: Mapping[int, int] | None = None,
    splits: Mapping[str, list[int]] | None = None,
) -> ScanReport:
    """Find sessions under ``data_dir``.

    Returns every session that has a video, annotation or transcript, and an issue for each
    file that is a duplicate (two videos, or two annotations of one target, for a session),
    unmatched (an annotation or transcript with no video; a video with no self-rating) or
    unparsable (a media or annotation file whose name has no ``Subject_<L>_Story_<S>``, a
    story with no speaker mapping, a CSV without a ``valence`` header).
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"data folder {root} does not exist; pass the folder holding the Subject_<L>_Story_<S> videos"
        )
    story_speaker = {int(k): int(v) for k, v in (story_speaker or STORY_SPEAKER).items()}
    splits = splits or SPLITS
    videos: dict[str, list[Path]] = defaultdict(list)
    annots: dict[tuple[str, str], list[Path]] = defaultdict(list)
    transcripts: dict[str, list[Path]] = defaultdict(list)
    issues: list[ScanIssue] = []
    ids: dict[str, tuple[int, int]] = {}

    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        ext = path.suffix.lower()
        if ext not in VIDEO_EXTS + TRANSCRIPT_EXTS + TABLE_EXTS:
            continue
        ls = parse_session(path.stem)
        if ls is None:
            if ext in VIDEO_EXTS or ext in TRANSCRIPT_EXTS:
                issues.append(
                    ScanIssue(
                        path,
                        "unparsable",
                        "name has no Subject_<L>_Story_<S>; rename it to the corpus pattern",
                    )
                )
            continue
        listener, story = ls
        if story not in story_speaker:
            issues.append(
                ScanIssue(
                    path,
                    "unparsable",
                    f"story {story} has no speaker mapping; add it under story_speaker in the config",
                )
            )
            continue
        sid = session_name(listener, story)
        ids[sid] = ls
        if ext in VIDEO_EXTS:
            videos[sid].append(path)
        elif ext in TRANSCRIPT_EXTS:
            transcripts[sid].append(path)
        else:
            header = _csv_header(path)
            if header is None or not header:
                issues.append(ScanIssue(path, "unparsable", "not a readable CSV file"))
                continue
            if "valence" not in header:
                # Per-frame feature tables (for `featurestore import`) live beside annotations in
                # some layouts; only a CSV that looks like an annotation is reported.
                if len(header) <= 2:
                    issues.append(
                        ScanIssue(
                            path, "unparsable", f"CSV header {header} has no 'valence' column"
                        )
                    )
                continue
            annots[(sid, annotation_target(path, root))].append(path)

    sessions: list[SessionFiles] = []
    for sid, (listener, story) in sorted(ids.items(), key=lambda kv: kv[1]):
        sf = SessionFiles(sid, listener, story, story_speaker[story], story_split(story, splits))
        vids = videos.get(sid, [])
        if vids:
            sf.video = vids[0]
            for extra in vids[1:]:
                issues.append(
                    ScanIssue(
                        extra, "duplicate", f"second video for {sid} (first: {vids[0]}); keep one"
                    )
                )
        for (asid, target), paths in annots.items():
            if asid != sid:
                continue
            sf.annotations[target] = paths[0]
            for extra in paths[1:]:
                issues.append(
                    ScanIssue(
                        extra,
                        "duplicate",
                        f"second {target} annotation for {sid} (first: {paths[0]}); keep one",
                    )
                )
        trs = transcripts.get(sid, [])
        if trs:
            sf.transcript = trs[0]
            for extra in trs[1:]:
                issues.append(
                    ScanIssue(
                        extra,
                        "duplicate",
                        f"second transcript for {sid} (first: {trs[0]}); keep one",
                    )
                )
        if sf.video is None:
            for p in list(sf.annotations.values()) + ([sf.transcript] if sf.transcript else []):
                issues.append(ScanIssue(p, "unmatched", f"no video for {sid}"))
        elif "valence_self" not in sf.annotations:
            issues.append(
                ScanIssue(
                    sf.video,
                    "unmatched",
                    f"no self-annotation CSV (header 'valence') for {sid}; it can be extracted but not used for training",
                )
            )
        sessions.append(sf)
    return ScanReport(sessions, issues)


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
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)
    return path
