"""Extractors, one module each; importing this package registers none (imports are lazy)."""

from .base import (
    AudioExtractor,
    Extractor,
    ExtractorConfig,
    ExtractorUnavailable,
    FrameExtractor,
    Track,
    TranscriptExtractor,
    get_extractor,
    register,
    registry,
)

_BUILTIN = ("face_geom", "face_au", "egemaps", "transcript")
_loaded = False


def load_builtin() -> None:
    """Import the built-in extractor modules so they register themselves (idempotent)."""
    global _loaded
    if _loaded:
        return
    import importlib

    for mod in _BUILTIN:
        importlib.import_module(f"{__name__}.{mod}")
    _loaded = True


__all__ = [
    "AudioExtractor",
    "Extractor",
    "ExtractorConfig",
    "ExtractorUnavailable",
    "FrameExtractor",
    "Track",
    "TranscriptExtractor",
    "get_extractor",
    "load_builtin",
    "register",
    "registry",
]
