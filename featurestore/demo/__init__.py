"""The embedded demo corpora, built offline in seconds (docs/demo.md): an OMG-Empathy-shaped one
(:func:`build_demo`) and a monadic one laid out by a manifest (:func:`build_monadic_demo`)."""

from .build import build_demo
from .face import face_rig, piecewise_affine_map
from .files import DemoInfo, transcript_cues, transcript_srt, valence_csv
from .model import (
    GENERATOR_VERSION,
    LABEL_DELAY_S,
    SMILE_LEVELS,
    listener_params,
    speaker_params,
    story_curve,
)
from .monadic import build_monadic_demo, plan_monadic
from .plan import SessionPlan, plan_session

__all__ = [
    "GENERATOR_VERSION",
    "LABEL_DELAY_S",
    "SMILE_LEVELS",
    "DemoInfo",
    "SessionPlan",
    "build_demo",
    "build_monadic_demo",
    "face_rig",
    "listener_params",
    "piecewise_affine_map",
    "plan_monadic",
    "plan_session",
    "speaker_params",
    "story_curve",
    "transcript_cues",
    "transcript_srt",
    "valence_csv",
]
