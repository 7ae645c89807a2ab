"""The one small interface every extractor implements, and the registry by name: a
:class:`FrameExtractor` sees each role's video crops through a :class:`Track`, an
:class:`AudioExtractor` the audio once, a :class:`TranscriptExtractor` the cues. Its config is
a frozen dataclass of its params; its ``version`` is bumped whenever its output can change
(docs/development.md, adding an extractor).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from ..errors import FeaturestoreError
from ..features import Features
from ..storage.shard import CHANNEL_HINTS


class ExtractorUnavailable(FeaturestoreError, RuntimeError):
    """The extractor cannot run on this machine (missing extra or model weights); says how to fix it."""


@dataclass(frozen=True)
class ExtractorConfig:
    """Base of extractor configs; subclasses add fields."""


#: an extractor's own config class (each extractor is ``Extractor[ItsConfig]``)
C = TypeVar("C", bound=ExtractorConfig)


class Extractor(ABC, Generic[C]):
    """An extractor over its config class ``C``: ``self.config`` is a ``C``, so an extractor
    reads its own fields with their types."""

    #: channel name in the store (``face_geom``, ``egemaps`` ...)
    name: ClassVar[str]
    #: what extraction decodes for it: ``video``, ``audio`` or ``transcript`` (its base class says)
    kind: ClassVar[str]
    #: bump whenever the output changes for the same input: invalidates cached channels
    version: ClassVar[str]
    #: the config dataclass (``C``); its defaults are used when no config is given
    config_class: type[C]
    #: the command that adds a missing channel of this extractor, for an extractor with its own
    #: way in (None: ``featurestore extract``); the store's errors name it
    how_to_add: ClassVar[str | None] = None

    def __init__(self, config: C | None = None) -> None:
        self.config: C = config if config is not None else self.config_class()

    def params(self) -> dict[str, Any]:
        """Parameters recorded in provenance and hashed into the cache key."""
        return asdict(self.config)

    def check_available(self) -> None:
        """Raise :class:`ExtractorUnavailable` with a how-to when this extractor cannot run here."""
        return None

    def lookahead_s(self) -> float | None:
        """Seconds after a row's ``time`` that its values read of the input, fixed by the code
        and config (docs/channels.md, how far ahead each channel reads); None when it depends
        on the data or the extractor does not say."""
        return None


class Track(ABC):
    """Per-role state of a frame extractor over one video (e.g. a face tracker)."""

    @abstractmethod
    def add(self, time_s: float, image: np.ndarray) -> None:
        """Process one crop taken at ``time_s`` seconds, in its extractor's ``pixel_format``
        (RGB: (H, W, 3) uint8; grey: (H, W) uint8)."""

    @abstractmethod
    def result(self) -> Features:
        """Features for every frame added, in order (invalid rows hold NaN)."""


class FrameExtractor(Extractor[C]):
    """Sees each role's sampled video crops through a per-role :class:`Track`."""

    kind: ClassVar[str] = "video"
    #: roles whose crops this extractor wants
    roles: ClassVar[tuple[str, ...]] = ("speaker", "listener")
    #: what extraction decodes the frames to for its tracks: ``rgb24`` or ``gray`` (full-range
    #: luma, see :func:`featurestore.sources.media.luma`)
    pixel_format: ClassVar[str] = "rgb24"

    @abstractmethod
    def new_track(self, role: str) -> Track:
        """A fresh per-role track for one video."""

    def lookahead_s(self) -> float:
        """0: a row reads the one video frame at its time (a track only carries the past)."""
        return 0.0


def decode_lookahead_s(sampling_rate: int) -> float:
    """Seconds of source audio (of at least 8 kHz) after an output sample that decoding at
    ``sampling_rate`` Hz reads: FFmpeg's resampler reaches 16 / 0.97 samples of the lower rate
    ahead (docs/channels.md, how far ahead each channel reads).

    >>> round(decode_lookahead_s(16000) * 1000, 2)
    2.06
    """
    return 16.0 / (0.97 * min(float(sampling_rate), 8000.0))


class AudioExtractor(Extractor[C]):
    """Its audio track is decoded at its :attr:`sampling_rate` (Hz)."""

    kind: ClassVar[str] = "audio"

    @property
    @abstractmethod
    def sampling_rate(self) -> int:
        """Rate in Hz the audio track is decoded at for this extractor."""

    @abstractmethod
    def process_signal(self, signal: np.ndarray, sampling_rate: int) -> dict[str, Features]:
        """Features per role from a mono float32 signal at ``sampling_rate`` Hz."""


class TranscriptExtractor(Extractor[C]):
    """Per-frame features of each role from a session's transcript cues (no media decoding)."""

    kind: ClassVar[str] = "transcript"
    #: roles this extractor writes a channel for
    roles: ClassVar[tuple[str, ...]] = ("speaker", "listener")
    how_to_add: ClassVar[str | None] = (
        "add the session's transcript with `featurestore transcripts TRANSCRIPT_DIR` (or put it "
        "beside the video and re-run `featurestore extract`)"
    )

    @abstractmethod
    def process_cues(self, cues: Sequence, n_frames: int, fps: float) -> dict[str, Features]:
        """Features per role at frame times ``i / fps`` seconds, ``i < n_frames``, from
        :class:`featurestore.sources.transcripts.Cue` objects."""

    def cues_lookahead_s(self, cues: Sequence, role: str) -> float:
        """Seconds after a frame that ``role``'s channel reads of ``cues``: the longest of the
        role's cues (0 without any), as a frame inside a cue may read all of it."""
        return max((float(c.end_s - c.start_s) for c in cues if c.role == role), default=0.0)


_REGISTRY: dict[str, type[Extractor[Any]]] = {}

#: an extractor class (what :func:`register` decorates and returns unchanged)
E = TypeVar("E", bound=type[Extractor[Any]])


def register(cls: E) -> E:
    """Class decorator: make an extractor available by its ``name`` (and its ``how_to_add``)."""
    _REGISTRY[cls.name] = cls
    if cls.how_to_add:
        CHANNEL_HINTS[cls.name] = cls.how_to_add
    return cls


def get_extractor(name: str) -> type[Extractor[Any]]:
    """The extractor class registered as ``name``."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown extractor {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def registry() -> dict[str, type[Extractor[Any]]]:
    """Name -> extractor class of every registered extractor."""
    return dict(_REGISTRY)


def channels_of_kind(kind: str) -> tuple[str, ...]:
    """The channels of the registered extractors of ``kind`` (``video``, ``audio``,
    ``transcript``), in registration order.

    >>> channels_of_kind("transcript")
    ('speech', 'lexicon')
    """
    return tuple(name for name, cls in _REGISTRY.items() if cls.kind == kind)


def known_lookahead_s(
    extractor: str, version: str, params: Mapping[str, Any], recorded: float | None = None
) -> float | None:
    """A stored channel's look-ahead in seconds: ``recorded`` when there is one, else what the
    registered ``extractor`` declares for ``params`` while its version is still ``version``;
    None (unknown) otherwise.

    >>> known_lookahead_s("face_geom", get_extractor("face_geom").version, {})
    0.0
    >>> known_lookahead_s("import:openface", "2", {}) is None
    True
    """
    if recorded is not None:
        return float(recorded)
    cls = _REGISTRY.get(extractor)
    if cls is None or cls.version != version:
        return None
    names = {f.name for f in fields(cls.config_class)}
    try:
        ex = cls(cls.config_class(**{k: v for k, v in params.items() if k in names}))
    except (TypeError, ValueError):  # params this version's config does not take
        return None
    return ex.lookahead_s()
