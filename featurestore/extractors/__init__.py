"""Extractors, one module each; importing this package registers the built-in ones by name.

The interface (:class:`Extractor` and its three kinds) and the registry live in
:mod:`featurestore.extractors.base`; each built-in module registers its extractors when
imported, which this package does below. None of them imports its heavy third-party library
(openSMILE, dlib, py-feat) before it is used.
"""

from . import egemaps, face_au, face_geom, transcript  # noqa: F401 - registers the built-in extractors
from .base import (
    AudioExtractor,
    Extractor,
    ExtractorConfig,
    ExtractorUnavailable,
    FrameExtractor,
    Track,
    TranscriptExtractor,
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
    "get_extractor",
    "known_lookahead_s",
    "register",
    "registry",
]
