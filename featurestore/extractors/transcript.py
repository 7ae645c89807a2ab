"""Per-frame features of each role from transcript cues at the label rate: ``speech`` and
``lexicon``. Untagged cues are ignored, overlapping ones add up, ``valid`` runs to the last
cue's end plus ``coverage_tail_s``; the columns and the VADER scoring: docs/channels.md.
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
LEXICON_COLUMNS = (
    "vader_compound vader_pos vader_neg vader_neu lexicon_coverage words_recent".split()
)


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
    """``since_cap_s``: cap of ``since_spoke_s`` (s); ``coverage_tail_s``: see the module (s)."""

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
    """``window_s``: how long a cue counts after it ends (s), its weight halving every
    ``half_life_s`` (s); ``coverage_tail_s``: see the module (s)."""

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

    def params(self) -> dict:  # the installed VADER version too
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
