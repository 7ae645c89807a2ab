"""Per-frame features of each role from transcript cues: ``speech`` and ``lexicon``.

Both run at the label rate (frames ``t_i = i / fps`` seconds, 25 fps) on the cues of
:func:`featurestore.sources.transcripts.read_transcript`; cues without a role are ignored, cues of
one role may overlap (their contributions add up). A frame is inside a cue when
``start_s <= t < end_s``, the rule of :func:`featurestore.sources.speaking.speaking_from_transcript`.

``valid`` (both channels) is True where the transcript covers the session: from 0 to the
end of its last cue (any role, untagged too) plus ``coverage_tail_s`` (5 s: a pause after
the last words is still transcribed silence). Beyond that the transcript may simply have
stopped, so nothing is claimed there. A transcript without cues is valid nowhere.

``speech`` columns:

==============  ===========================================================================
talking         1 while one of the role's cues is on, else 0
words_per_s     sum over the role's cues on at the frame of (words in the cue / cue duration
                in seconds); a cue shorter than one frame counts as one frame long
since_spoke_s   seconds since the role's last cue ended; 0 while talking; ``since_cap_s``
                (60) when the role has not spoken yet or not for that long
==============  ===========================================================================

``lexicon`` columns, from the VADER sentiment lexicon and rules (Hutto & Gilbert 2014; the
``vaderSentiment`` package ships its lexicon file, so this runs offline):

================  =========================================================================
vader_compound    VADER compound score (-1 .. 1) of the role's recent words
vader_pos         VADER proportion of positive text (0 .. 1)
vader_neg         VADER proportion of negative text (0 .. 1)
vader_neu         VADER proportion of neutral text (0 .. 1)
lexicon_coverage  fraction of the recent words found in the VADER lexicon (0 .. 1)
words_recent      number of the role's words spoken in the current and recent cues
================  =========================================================================

How far ahead a frame reads (the channel's ``lookahead_s``, see
:meth:`featurestore.extractors.TranscriptExtractor.cues_lookahead_s`): ``talking`` and
``since_spoke_s`` read only that a cue has started or ended; ``words_per_s`` and the
``lexicon`` columns read a cue's word count and end from its first frame on, and the words
"said so far" are an even spread over the cue, not when each word was said: up to the longest
of the role's cues ahead. ``valid`` (the transcript's extent) is a property of the recording,
not counted.

"Recent" decays: inside a cue, words are spoken evenly over its span (word
``k`` of ``n`` at ``start + (k + 0.5) * duration / n``), so at frame ``t`` the cue
contributes the first ``k(t)`` words, scored by VADER as that prefix (negations and
boosters apply within the cue). A cue keeps contributing for ``window_s`` (5 s) after it
ends, with weight ``k * 0.5 ** (age / half_life_s)`` (``age`` = seconds since its end, 0
while it is on; ``half_life_s`` 2 s). The four VADER columns and ``lexicon_coverage`` are
the weighted means over the contributing cues; ``words_recent`` is the plain sum of
``k``. With no recent words all columns are 0, which VADER also returns for empty text
(and ``valid`` stays True: silence is an observation, and ``words_recent`` says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from ..features import Features
from ..sources.speaking import speaking_from_transcript
from ..sources.transcripts import normalise_word, words
from .base import ExtractorConfig, ExtractorUnavailable, TranscriptExtractor, register

SPEECH_COLUMNS = ["talking", "words_per_s", "since_spoke_s"]
LEXICON_COLUMNS = [
    "vader_compound",
    "vader_pos",
    "vader_neg",
    "vader_neu",
    "lexicon_coverage",
    "words_recent",
]


def frame_times(n_frames: int, fps: float) -> np.ndarray:
    """Label frame times ``i / fps`` in seconds, ``i < n_frames``."""
    if n_frames < 0 or not fps > 0:
        raise ValueError(f"need n_frames >= 0 and fps > 0, got {n_frames} and {fps}")
    return np.arange(int(n_frames)) / float(fps)


def coverage(cues: Sequence, times: np.ndarray, tail_s: float) -> np.ndarray:
    """Bool per frame: at or before the end of the transcript's last cue + ``tail_s`` seconds."""
    if not cues:
        return np.zeros(times.shape, bool)
    end = max(float(c.end_s) for c in cues)
    return times <= end + tail_s + 1e-9


def _frame_span(times: np.ndarray, start: float, end: float) -> tuple[int, int]:
    """Indices ``[i0, i1)`` of the frames with ``start <= t < end``."""
    return int(np.searchsorted(times, start, "left")), int(np.searchsorted(times, end, "left"))


@dataclass(frozen=True)
class SpeechConfig(ExtractorConfig):
    """``since_cap_s``: cap of ``since_spoke_s`` (s); ``coverage_tail_s``: see the module docstring (s)."""

    since_cap_s: float = 60.0
    coverage_tail_s: float = 5.0


@register
class SpeechExtractor(TranscriptExtractor[SpeechConfig]):
    """Is talking, words per second and time since the role last spoke, per label frame.

    >>> from featurestore.sources.transcripts import Cue
    >>> out = SpeechExtractor().process_cues([Cue(0.2, 0.6, "speaker", "one two")], 10, 10.0)
    >>> out["speaker"].data[:, 0].tolist()
    [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    """

    name = "speech"
    version = "2"  # 2: its channels record lookahead_s (the longest cue)
    config_class = SpeechConfig

    def process_cues(self, cues: Sequence, n_frames: int, fps: float) -> dict[str, Features]:
        cfg: SpeechConfig = self.config
        t = frame_times(n_frames, fps)
        valid = coverage(cues, t, cfg.coverage_tail_s)
        talking = speaking_from_transcript(
            [(c.start_s, c.end_s, c.role) for c in cues if c.role in self.roles], t
        )
        out = {}
        for role in self.roles:
            mine = [c for c in cues if c.role == role]
            rate = np.zeros(t.size + 1)
            for c in mine:
                i0, i1 = _frame_span(t, c.start_s, c.end_s)
                r = len(c.words) / max(c.end_s - c.start_s, 1.0 / fps)
                rate[i0] += r
                rate[i1] -= r
            words_per_s = np.cumsum(rate[:-1])
            words_per_s[np.abs(words_per_s) < 1e-9] = 0.0  # float residue of +r -r
            ends = np.sort(np.array([c.end_s for c in mine], dtype=np.float64))
            since = np.full(t.size, float(cfg.since_cap_s))
            last = np.searchsorted(ends, t, side="right") - 1  # the latest cue end at or before t
            spoke = last >= 0
            since[spoke] = np.minimum(t[spoke] - ends[last[spoke]], cfg.since_cap_s)
            since[talking[role]] = 0.0
            data = np.column_stack([talking[role].astype(np.float64), words_per_s, since])
            out[role] = Features(data, t, valid, SPEECH_COLUMNS)
        return out


@dataclass(frozen=True)
class LexiconConfig(ExtractorConfig):
    """``window_s``: how long a cue counts after it ends (s); ``half_life_s``: its weight halves
    every ``half_life_s`` seconds after its end; ``coverage_tail_s``: see the module docstring (s)."""

    lexicon: str = "vader"
    window_s: float = 5.0
    half_life_s: float = 2.0
    coverage_tail_s: float = 5.0


@lru_cache(maxsize=1)
def vader_analyzer() -> Any:
    """VADER's analyser, built once per process (reads the lexicon file inside the package)."""
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer  # lazily: loads a lexicon

    return SentimentIntensityAnalyzer()


def vader_version() -> str:
    """Installed ``vaderSentiment`` version (part of the lexicon channel's parameters)."""
    try:
        return version("vaderSentiment")
    except PackageNotFoundError:
        return "unknown"


def prefix_scores(text: str) -> np.ndarray:
    """(n + 1, 5): VADER compound, pos, neg, neu and lexicon coverage of the first ``k`` words
    of ``text`` (row ``k``; row 0 is all zeros), ``n`` = number of words.

    >>> rows = prefix_scores("what a wonderful day")
    >>> rows.shape, bool(rows[3, 0] > 0), float(rows[4, 4])
    ((5, 5), True, 0.25)
    """
    analyzer = vader_analyzer()
    tokens = words(text)
    out = np.zeros((len(tokens) + 1, 5))
    known = (
        np.cumsum([normalise_word(w) in analyzer.lexicon for w in tokens])
        if tokens
        else np.zeros(0)
    )
    for k in range(1, len(tokens) + 1):
        s = analyzer.polarity_scores(" ".join(tokens[:k]))
        out[k] = (s["compound"], s["pos"], s["neg"], s["neu"], known[k - 1] / k)
    return out


@register
class LexiconExtractor(TranscriptExtractor[LexiconConfig]):
    """VADER sentiment of each role's current and recent words, per label frame (see the module docstring).

    >>> from featurestore.sources.transcripts import Cue
    >>> out = LexiconExtractor().process_cues([Cue(0.0, 1.0, "speaker", "what a great day")], 20, 10.0)
    >>> bool(out["speaker"].data[12, 0] > 0.5), float(out["listener"].data[12, 0])
    (True, 0.0)
    """

    name = "lexicon"
    version = "2"  # 2: its channels record lookahead_s (the longest cue)
    config_class = LexiconConfig

    def params(self) -> dict:
        return {**super().params(), "vader_version": vader_version()}

    def check_available(self) -> None:
        if self.config.lexicon != "vader":
            raise ExtractorUnavailable(
                f"lexicon {self.config.lexicon!r} is not supported; use 'vader'"
            )
        try:
            import vaderSentiment  # noqa: F401 - lazily: only to report a missing package
        except ImportError as exc:
            raise ExtractorUnavailable(
                "the lexicon channel needs the vaderSentiment package (its lexicon ships inside the wheel): "
                "pip install 'vaderSentiment>=3.3'"
            ) from exc

    def process_cues(self, cues: Sequence, n_frames: int, fps: float) -> dict[str, Features]:
        self.check_available()
        cfg: LexiconConfig = self.config
        t = frame_times(n_frames, fps)
        valid = coverage(cues, t, cfg.coverage_tail_s)
        out = {}
        for role in self.roles:
            acc = np.zeros((t.size, 5))
            weight = np.zeros(t.size)
            recent = np.zeros(t.size)
            for c in (c for c in cues if c.role == role):
                table = prefix_scores(c.text)
                n = table.shape[0] - 1
                if n == 0:
                    continue
                i0, i1 = _frame_span(t, c.start_s, c.end_s + cfg.window_s)
                if i1 <= i0:
                    continue
                tt = t[i0:i1]
                dur = c.end_s - c.start_s
                if dur > 0:
                    k = np.clip(
                        np.floor((tt - c.start_s) * n / dur - 0.5).astype(np.int64) + 1, 0, n
                    )
                else:
                    k = np.full(tt.size, n, np.int64)
                age = np.maximum(tt - c.end_s, 0.0)
                w = k * 0.5 ** (age / cfg.half_life_s)
                acc[i0:i1] += w[:, None] * table[k]
                weight[i0:i1] += w
                recent[i0:i1] += k
            mean = np.divide(
                acc, weight[:, None], out=np.zeros_like(acc), where=weight[:, None] > 0
            )
            data = np.column_stack([mean, recent])
            out[role] = Features(data, t, valid, LEXICON_COLUMNS)
        return out
