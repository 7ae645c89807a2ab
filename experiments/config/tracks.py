"""The OMG-Empathy challenge's two tracks: which configuration competes in which, and the metric
each is chosen by (docs/results.md, Two averages, two tracks).

A configuration is **personalized** as soon as something in it uses who is listening (a
personalization or rescaling of :data:`~.options.IDENTITY_PERSONALIZATIONS`,
:data:`~.options.IDENTITY_RESCALES`), else **generalized**. The tracks nest: the personalized
track chooses among every configuration, the generalized among its own; each is chosen on the
selection split under its own averaging (per listener, or per story, of per-session values).

>>> track_of("global", "train"), track_of("global", "listener")
('generalized', 'personalized')
>>> competes_in("generalized")
('personalized', 'generalized')
>>> selection_metric("generalized", "val")
'val.ccc_generalized'
>>> fused_track(["generalized", "personalized"]), fused_track(["generalized", "generalized"])
('personalized', 'generalized')
"""

from __future__ import annotations

from collections.abc import Sequence

from .metrics import DEFAULT_METRIC, get_metric
from .options import IDENTITY_PERSONALIZATIONS, IDENTITY_RESCALES, TRACKS, selection_split


def track_of(personalization: str, rescale: str) -> str:
    """The track of a configuration with this personalization strategy and rescaling mode."""
    if personalization in IDENTITY_PERSONALIZATIONS or rescale in IDENTITY_RESCALES:
        return "personalized"
    return "generalized"


def fused_track(member_tracks: Sequence[str], blend_uses_listener: bool = False) -> str:
    """The track of a late fusion (:mod:`experiments.config.fusion`): personalized as soon as one
    member configuration (``member_tracks``, each :func:`track_of`) or the blend itself uses who
    is listening, else generalized."""
    for t in member_tracks:
        if t not in TRACKS:
            raise ValueError(f"unknown track {t!r}; valid: {', '.join(TRACKS)}")
    if blend_uses_listener or "personalized" in member_tracks:
        return "personalized"
    return "generalized"


def competes_in(config_track: str) -> tuple[str, ...]:
    """The tracks a configuration of track ``config_track`` (:func:`track_of`) competes in: a
    personalized one only its own; a generalized one both (it does not use who is listening, so
    its predictions are a valid personalized submission too)."""
    if config_track not in TRACKS:
        raise ValueError(f"unknown track {config_track!r}; valid: {', '.join(TRACKS)}")
    return TRACKS if config_track == "generalized" else (config_track,)


def candidates(track: str) -> tuple[str, ...]:
    """The configuration tracks (:func:`track_of`) a track chooses among: every one for the
    personalized track, the generalized ones for the generalized track."""
    return tuple(t for t in TRACKS if track in competes_in(t))


def selection_metric(track: str, protocol: str = "val", metric: str = DEFAULT_METRIC) -> str:
    """The logged metric a track's configurations are ranked by: ``metric`` (a registered one,
    :mod:`~.metrics`, whose direction says which way is better) under the track's own averaging
    on the split the config's ``protocol`` chooses on (``val``, ``loso`` or ``cv``:
    :func:`~.options.selection_split`)."""
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; valid: {', '.join(TRACKS)}")
    return get_metric(metric).key(selection_split(protocol), track)
