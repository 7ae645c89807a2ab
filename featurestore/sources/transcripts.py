"""Transcripts (``.srt``, ``.ass``/``.ssa``, lines tagged ``[S]`` or ``[L]``) -> :class:`Cue`
objects sorted by start (:func:`read_transcript`); the reading rules: docs/channels.md
(transcripts: parsing rules). A bad time raises :class:`TranscriptError` naming file and line.

>>> cues = parse_srt("1\\n00:00:01,000 --> 00:00:02,500\\n[S] It was a lovely day.\\n[L] mm-hm\\n")
>>> [(c.start_s, c.end_s, c.role, c.text) for c in cues]
[(1.0, 2.5, 'speaker', 'It was a lovely day.'), (1.0, 2.5, 'listener', 'mm-hm')]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import FeaturestoreError

ROLES = ("speaker", "listener")
TRANSCRIPT_EXTS = (".srt", ".ass", ".ssa")

_TAG_RE = re.compile(r"\[\s*(s|l|speaker|listener)\s*\]\s*:?\s*", re.IGNORECASE)
_ROLE_NAMES = {"s": "speaker", "speaker": "speaker", "l": "listener", "listener": "listener"}
_SRT_TIME = r"(?:(\d+):)?(\d{1,2}):(\d{1,2})(?:[,.](\d{1,3}))?"
_SRT_TIME_LINE = re.compile(rf"^\s*{_SRT_TIME}\s*-->\s*{_SRT_TIME}(?:\s+.*)?\s*$")
_ASS_TIME = re.compile(r"^\s*(\d+):(\d{1,2}):(\d{1,2})(?:\.(\d{1,3}))?\s*$")
_MARKUP_RE = re.compile(r"<[^>\n]*>|\{\\[^}\n]*\}")
_ASS_OVERRIDE_RE = re.compile(r"\{[^}]*\}")
_ASS_DEFAULT_FORMAT = "layer start end style name marginl marginr marginv effect text".split()
_WORD_STRIP = "\"'.,;:!?()[]{}<>«»“”‘’…-"


class TranscriptError(FeaturestoreError, ValueError):
    """A transcript cannot be read; the message names the file and line and what to fix."""


@dataclass(frozen=True)
class Cue:
    """What one ``role`` (``speaker``, ``listener`` or None: untagged) says from ``start_s`` to
    ``end_s`` (seconds from the session start): the cleaned ``text``, at ``line`` of the file."""

    start_s: float
    end_s: float
    role: str | None
    text: str
    line: int = 0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def words(self) -> list[str]:
        """Whitespace tokens that hold a letter or digit (punctuation-only tokens dropped)."""
        return words(self.text)


def words(text: str) -> list[str]:
    """Whitespace-separated tokens of ``text`` that contain a letter or digit.

    >>> words("Oh no -- it was... terrible!")
    ['Oh', 'no', 'it', 'was...', 'terrible!']
    """
    return [t for t in text.split() if any(ch.isalnum() for ch in t)]


def normalise_word(token: str) -> str:
    """A token lower-cased without surrounding punctuation (``"Great!"`` -> ``"great"``)."""
    return token.strip(_WORD_STRIP).lower()


# ----------------------------------------------------------------------------- decoding
def decode(data: bytes) -> str:
    """Text of a transcript file: UTF-8 (BOM or not), else Windows-1252; BOMs removed."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    return text.replace("\ufeff", "")


def _lines(text: str) -> list[str]:
    # not splitlines(), which also splits at \x1c-\x1e, \x85, \u2028 ...
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


# ----------------------------------------------------------------------------- roles
def role_name(label: str) -> str | None:
    """``"S"``/``"Speaker"`` -> ``"speaker"``, ``"L"``/``"Listener"`` -> ``"listener"``, else None."""
    return _ROLE_NAMES.get(label.strip().lower())


def _segments(lines: Sequence[str], default_role: str | None) -> list[tuple[str | None, str]]:
    """(role, text) runs of a cue's lines, in order, by the tag rules of the module docstring."""
    out: list[tuple[str | None, str]] = []
    role = default_role
    for line in lines:
        pos = 0
        for m in _TAG_RE.finditer(line):
            before = line[pos : m.start()].strip()
            if before:
                out.append((role, before))
            role = _ROLE_NAMES[m.group(1).lower()]
            pos = m.end()
        rest = line[pos:].strip()
        if rest:
            out.append((role, rest))
    return out


def _cues_of(
    start: float, end: float, lines: Sequence[str], default_role: str | None, line_no: int
) -> list[Cue]:
    """One :class:`Cue` per role found in ``lines`` (texts of a role joined by spaces)."""
    texts: dict[str | None, list[str]] = {}
    for role, text in _segments(lines, default_role):
        texts.setdefault(role, []).append(text)
    return [Cue(start, end, role, " ".join(parts), line_no) for role, parts in texts.items()]


def _clean_srt_text(line: str) -> str:
    text = _MARKUP_RE.sub("", line).strip()
    return re.sub(r"^-\s*", "", text)


# ----------------------------------------------------------------------------- SRT
def _seconds(groups: Sequence[str | None], source: str, line_no: int, raw: str) -> float:
    h, m, s, frac = groups
    assert m is not None and s is not None, "both time patterns require minutes and seconds"
    minutes, seconds = int(m), int(s)
    if minutes >= 60 or seconds >= 60:
        raise TranscriptError(
            f"{source}:{line_no}: time {raw.strip()!r} has minutes or seconds >= 60; "
            "write it as HH:MM:SS,mmm and fix that cue"
        )
    value = int(h or 0) * 3600 + minutes * 60 + seconds
    if frac:
        value += int(frac) / 10 ** len(frac)
    return float(value)


def _check_span(start: float, end: float, source: str, line_no: int, raw: str) -> None:
    if end < start:
        raise TranscriptError(
            f"{source}:{line_no}: cue ends before it starts ({raw.strip()!r}); swap or fix the times of that cue"
        )


def parse_srt(text: str, source: str = "<srt>") -> list[Cue]:
    """Cues of SubRip text (see the module docstring for the rules); ``source`` names it in errors."""
    cues: list[Cue] = []
    block: list[tuple[int, str]] = []

    def flush() -> None:
        if not block:
            return
        time_at = next((i for i, (_, ln) in enumerate(block) if "-->" in ln), None)
        if time_at is None:
            if not cues:
                no = block[0][0]
                raise TranscriptError(
                    f"{source}:{no}: text before the first cue time; an SRT cue needs a line "
                    "'HH:MM:SS,mmm --> HH:MM:SS,mmm' before its text"
                )
            # a blank line inside a cue's text: the block continues the previous cue
            last = cues.pop()
            text_lines = [_clean_srt_text(ln) for _, ln in block]
            extra = _cues_of(last.start_s, last.end_s, text_lines, last.role, last.line)
            merged = {c.role: c for c in extra}
            same = merged.pop(last.role, None)
            cues.append(replace(last, text=f"{last.text} {same.text}".strip()) if same else last)
            cues.extend(merged.values())
            block.clear()
            return
        no, raw = block[time_at]
        m = _SRT_TIME_LINE.match(raw)
        if m is None:
            raise TranscriptError(
                f"{source}:{no}: cannot read the cue times {raw.strip()!r}; expected 'HH:MM:SS,mmm --> HH:MM:SS,mmm' "
                "(e.g. 00:01:02,500 --> 00:01:04,000): fix that line"
            )
        start = _seconds(m.groups()[:4], source, no, raw)
        end = _seconds(m.groups()[4:], source, no, raw)
        _check_span(start, end, source, no, raw)
        text_lines = [_clean_srt_text(ln) for _, ln in block[time_at + 1 :]]
        cues.extend(_cues_of(start, end, text_lines, None, no))
        block.clear()

    for no, line in enumerate(_lines(text), start=1):
        if line.strip():
            # a time line always opens a new cue, even without a blank line before it
            if "-->" in line and any("-->" in ln for _, ln in block):
                index_line = block[-1] if block and block[-1][1].strip().isdigit() else None
                if index_line:
                    block.pop()
                flush()
                if index_line:
                    block.append(index_line)
            block.append((no, line))
        else:
            flush()
    flush()
    return sorted(cues, key=lambda c: c.start_s)


# ----------------------------------------------------------------------------- ASS
def _ass_seconds(value: str, source: str, line_no: int) -> float:
    m = _ASS_TIME.match(value)
    if m is None:
        raise TranscriptError(
            f"{source}:{line_no}: cannot read the time {value.strip()!r}; ASS times are H:MM:SS.cc "
            "(e.g. 0:01:02.50): fix that Dialogue line"
        )
    return _seconds(m.groups(), source, line_no, value)


def parse_ass(text: str, source: str = "<ass>") -> list[Cue]:
    """Cues of Advanced SubStation Alpha (or SSA) text; ``source`` names it in errors."""
    fields = list(_ASS_DEFAULT_FORMAT)
    cues: list[Cue] = []
    section = ""
    for no, line in enumerate(_lines(text), start=1):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped.lower()
            continue
        head, sep, rest = stripped.partition(":")
        kind = head.strip().lower()
        if not sep:
            continue
        if kind == "format" and section in ("[events]", ""):
            fields = [f.strip().lower() for f in rest.split(",")]
            if "start" not in fields or "end" not in fields or fields[-1] != "text":
                raise TranscriptError(
                    f"{source}:{no}: the [Events] Format line {stripped!r} needs Start, End and, last, Text fields"
                )
            continue
        if kind != "dialogue":
            continue
        values = rest.split(",", len(fields) - 1)
        if len(values) != len(fields):
            raise TranscriptError(
                f"{source}:{no}: Dialogue line has {len(values)} fields but the Format line names {len(fields)} "
                f"({', '.join(fields)}); fix that line"
            )
        row = dict(zip(fields, values, strict=True))
        start = _ass_seconds(row["start"], source, no)
        end = _ass_seconds(row["end"], source, no)
        _check_span(start, end, source, no, f"{row['start']},{row['end']}")
        body = _ASS_OVERRIDE_RE.sub("", row["text"]).replace("\\h", " ")
        lines = re.split(r"\\[Nn]", body)
        default = role_name(row.get("name", "")) or role_name(row.get("style", ""))
        cues.extend(_cues_of(start, end, lines, default, no))
    return sorted(cues, key=lambda c: c.start_s)


# ----------------------------------------------------------------------------- files
def read_transcript(path: str | Path) -> list[Cue]:
    """Cues of one ``.srt``, ``.ass`` or ``.ssa`` file, sorted by start time; raises
    :class:`TranscriptError` (file and line) for an unreadable time or another extension."""
    path = Path(path)
    ext = path.suffix.lower()
    text = decode(path.read_bytes())
    if ext == ".srt":
        return parse_srt(text, str(path))
    if ext in (".ass", ".ssa"):
        return parse_ass(text, str(path))
    raise TranscriptError(f"{path}: unknown transcript type {ext!r}; use .srt or .ass")


def speaking_intervals(cues: Iterable[Cue]) -> list[tuple[float, float, str]]:
    """``(start_s, end_s, role)`` of every tagged cue (for :func:`~.speaking.speaking_from_transcript`)."""
    return [(c.start_s, c.end_s, c.role) for c in cues if c.role in ROLES]


def describe(cues: Sequence[Cue]) -> str:
    """One line: cue and word counts per role, e.g. for a command's summary."""
    parts = []
    for role in (*ROLES, None):
        mine = [c for c in cues if c.role == role]
        if mine or role is not None:
            name = role or "untagged"
            parts.append(f"{name} {len(mine)} cues/{sum(len(c.words) for c in mine)} words")
    end = max((c.end_s for c in cues), default=0.0)
    return f"{', '.join(parts)}, to {end:.1f} s"
