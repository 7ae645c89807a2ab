"""The OMG-Empathy challenge's two tracks: which configuration competes in which, and how each is scored.

The challenge (Barros et al., ACII 2019, section V) has two tracks that differ by the
*model*, not by the averaging:

* **personalized**: a model of how the stories affect *a specific person*; it may use who
  is listening (one model per listener, per-listener calibration or rescaling, the
  listener's identity as a feature);
* **generalized**: a model of a story's impact on listeners *in general*; it does not know
  who is listening.

A configuration belongs to the personalized track as soon as anything in it uses the
listener's identity (:data:`~experiments.config.options.IDENTITY_PERSONALIZATIONS`,
:data:`~experiments.config.options.IDENTITY_RESCALES`); smoothing is a fixed filter and never
does. The tracks **nest** (:func:`competes_in`): a model that does not know who is listening
may be submitted to the personalized track too (the challenge allows the same predictions in
both), so the personalized track chooses among every configuration and the generalized track
among its own; the personalized choice is then never below the generalized one on the
selection split. Each track is chosen on validation (or LOSO) under its own averaging of
per-session CCC, and reported once on test under the same averaging:

* personalized: for each listener the mean over their stories, then the mean over listeners;
* generalized: for each story the mean over listeners, then the mean over stories.

On a complete listener x story table the two averages are the same number; the tracks then
differ only by their models, which is the point of the comparison.

>>> track_of("global", "train")
'generalized'
>>> track_of("global", "listener")
'personalized'
>>> competes_in("generalized")
('personalized', 'generalized')
>>> selection_metric("generalized", "val")
'val.ccc_generalized'
>>> fused_track(["generalized", "personalized"]), fused_track(["generalized", "generalized"])
('personalized', 'generalized')
"""

from __future__ import annotations

from collections.abc import Sequence

from .metrics import get_metric
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


def selection_metric(track: str, protocol: str = "val", metric: str = "ccc") -> str:
    """The logged metric a track's configurations are ranked by: ``metric`` (a registered one,
    :mod:`~.metrics`, whose direction says which way is better) under the track's own averaging
    on the split the config's ``protocol`` chooses on (``val``, ``loso`` or ``cv``:
    :func:`~.options.selection_split`)."""
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}; valid: {', '.join(TRACKS)}")
    return get_metric(metric).key(selection_split(protocol), track)
