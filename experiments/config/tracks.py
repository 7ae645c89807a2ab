"""The OMG-Empathy challenge's two tracks: which configuration competes in which, and the metric
each is chosen by (docs/results.md, Two averages, two tracks)."""

from __future__ import annotations

from collections.abc import Sequence

from .metrics import DEFAULT_METRIC, get_metric
from .options import IDENTITY_PERSONALIZATIONS, IDENTITY_RESCALES, TRACKS, selection_split


def _check(track: str) -> None:
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; valid: {', '.join(TRACKS)}")


def track_of(personalization: str, rescale: str) -> str:
    """The track of a configuration with this personalization strategy and rescaling mode."""
    if personalization in IDENTITY_PERSONALIZATIONS or rescale in IDENTITY_RESCALES:
        return "personalized"
    return "generalized"


def fused_track(member_tracks: Sequence[str], blend_uses_listener: bool = False) -> str:
    """The track of a late fusion: personalized as soon as one member configuration or the blend
    itself uses who is listening."""
    for t in member_tracks:
        _check(t)
    if blend_uses_listener or "personalized" in member_tracks:
        return "personalized"
    return "generalized"


def competes_in(config_track: str) -> tuple[str, ...]:
    """The tracks a configuration of track ``config_track`` competes in: a generalized one both
    (its predictions are a valid personalized submission too)."""
    _check(config_track)
    return TRACKS if config_track == "generalized" else (config_track,)


def candidates(track: str) -> tuple[str, ...]:
    """The configuration tracks a track chooses among."""
    return tuple(t for t in TRACKS if track in competes_in(t))


def selection_metric(track: str, protocol: str = "val", metric: str = DEFAULT_METRIC) -> str:
    """The logged metric a track's configurations are ranked by: ``metric`` under the track's
    own averaging on the split the config's ``protocol`` chooses on."""
    _check(track)
    return get_metric(metric).key(selection_split(protocol), track)
