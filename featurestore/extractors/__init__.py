"""Extractors, one module each (the interface and registry: :mod:`~.base`); importing this
package registers the built-in ones, none of which imports its heavy library before use."""

from . import egemaps, face_au, face_geom, transcript  # noqa: F401 - registers the built-in extractors
from .base import (
    AudioExtractor,
    Extractor,
    ExtractorConfig,
    ExtractorUnavailable,
    FrameExtractor,
    Track,
    TranscriptExtractor,
    channels_of_kind,
    get_extractor,
    known_lookahead_s,
    register,
    registry,
)

__all__ = [
    "AudioExtractor",
    "Extractor",
    "ExtractorConfig",
    "ExtractorUnavailable",
    "FrameExtractor",
    "Track",
    "TranscriptExtractor",
    "channels_of_kind",
    "get_extractor",
    "known_lookahead_s",
    "register",
    "registry",
]
