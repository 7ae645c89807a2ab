"""The embedded demo corpus: a small OMG-Empathy-shaped data set, built offline in seconds.

OMG-Empathy is licence-gated, so every part of the tool also runs on this corpus.
:func:`build_demo` writes, for ``n_listeners`` listeners x ``stories``::

    <out_dir>/Videos/Subject_<L>_Story_<S>.mp4       H.264 yuv420p, 25 fps, AAC 44.1 kHz mono
    <out_dir>/Annotations/Subject_<L>_Story_<S>.csv  header ``valence``, one row per video frame
    <out_dir>/Transcripts/transcribed_subject_<L>_story_<S>.srt   [S]/[L]-tagged cues
    <out_dir>/Observer_Listener/Subject_<L>_Story_<S>.csv       observer rating of the listener
    <out_dir>/Observer_Speaker/Subject_<L>_Story_<S>.csv        observer rating of the speaker
    <out_dir>/README.md                              what was planted, with this build's numbers
    <out_dir>/demo_truth.json                        the seed and every latent signal's parameters
    <out_dir>/featurestore.yaml                      extraction settings for the folder

**Faces.** One real face, the public-domain NASA portrait in ``skimage.data.astronaut()``,
cropped around the head and upscaled 2x (about 180 px from brow to chin). The speaker (left
of x = 1080/2560 of the width, as :func:`featurestore.sources.media.role_regions` splits) is a
mirrored, colour-shifted copy; each listener (right) has their own tint. Expressions are
piecewise-affine warps (the model of ``skimage.transform.PiecewiseAffineTransform``,
evaluated in one vectorised pass by :func:`piecewise_affine_map`) of the 68 dlib landmarks
of the photo plus a ring of fixed border points, rendered once per state and reused: 7 smile
levels (lip corners out and up, cheeks up), 4 mouth-opening levels (lower lip and jaw down),
3 blink levels and a brow raise. The upper face (brows, eyes) and the
lower face (mouth, jaw, cheeks) are warped in separate bands that meet at the nose tip, so
a frame is composed from one upper and one lower state without a per-frame warp. Heads move
a few pixels (smooth random translation; the listener nods during backchannels).

**Voices.** The speaker talks in phrases of 1.2-3.5 s separated by 0.35-1.5 s pauses; a
phrase is a run of 130-260 ms syllables of a band-limited glottal source (harmonics
falling 6 dB/octave, F0 about 125 Hz for odd speakers and 175 Hz for even ones, with a
declining intonation contour, pitch accents and some final rises) through a cascade of
three formant resonators (one of five vowels per syllable), with short fricative noise
bursts between some syllables. The speaker's mouth opening follows the speech loudness
frame by frame, and the brows rise on accented syllables. The listener backchannels
("mm-hm": two nasal voiced bursts around 200-240 Hz, 0.5 s in all) in the first pause and
in about a third of the later ones, opening the mouth and nodding meanwhile. Backchannels
are random: they carry no label information.

**The story's common curve.** Each story has an affect curve ``c_S(t)`` in [-1, 1]
(:func:`story_curve`: smooth noise with a 2.5 s time scale and sd 0.55, from the seed and the
story alone), what every telling of the story carries whoever listens. The speaker's face
tells it (their smile state moves two levels per unit of ``c_S``), their words carry it
(below), and every listener feels it with their own sign (``story_sign``: -1 for listeners
2, 7, ..., who feel against the story; +1 for the others).

**Words.** Each phrase has an affect ``a_p`` in [-1, 1], the story's curve at the phrase's
start plus the telling's own variation (``a_p = clip(0.8 * c_S(start) + N(0, 0.3), -1, 1)``),
and a sentence of about one word per
1.5 syllables: neutral filler words (none of them in the VADER lexicon) of which
``round(3 * |a_p|)`` are replaced by positive (``a_p > 0``) or negative VADER lexicon words
(:data:`POSITIVE_WORDS`, :data:`NEGATIVE_WORDS`). The words are a word salad: only their
sentiment is planted. The listener's backchannel is "wow" after a phrase with ``a_p > 0.35``,
"oh no" after one with ``a_p < -0.35``, else "mm-hm". The transcript has one ``[S]`` cue per
phrase and one ``[L]`` cue per backchannel at their synthesised times, written as Windows
subtitle editors do (UTF-8 with a byte-order mark, CRLF), with two deliberate quirks: the
first backchannel and the phrase before it share one cue carrying both tags, and the longest
other phrase is split into two ``[S]`` cues that overlap by 0.4 s (:func:`transcript_cues`).
The speaker's voice does not depend on ``a_p``.

**Labels (valence_self), the planted relations.** Each session has a latent listener smile
``smile(t)`` in [0, 1]: a per-listener baseline, plus the story as this listener feels it
(``0.45 * story_sign_L * c_S(t)``), plus a few random smile events of their own
(raised-cosine rise, hold, decay; event rate and size per listener) plus slow noise. The
listener's face shows it (nearest of the 7 smile levels). The self-rated valence is::

    valence(t) = offset_L + gain_L * smile(t - 1.5 s)
                 + 0.05 * z(speaker loudness averaged over the last 3 s)
                 + 0.2 * story_sign_L * causal_smooth(affect(t), 2 s)
                 + slow noise (sd 0.03) + white noise (sd 0.01),   clipped to [-1, 1]

where ``affect(t)`` is the affect ``a_p`` of the latest phrase the speaker has started (0
before the first) and ``causal_smooth`` an exponential moving average with a 2 s time
constant. So the listener's expression at time t shows in the valence 1.5 s later (a label
delay, as in the challenge's well-known trick), the speaker's voice carries a weak signal,
what the speaker says a moderate one that neither face nor voice shows (the lexical channel
should add to them), and ``offset_L`` (-0.35 to 0.15), ``gain_L`` (0.6 to 1.2) and
``story_sign_L`` differ per listener. So the two challenge tracks differ: a model that knows
who listens can match each listener's level, scale and sign (the personalized track); one
that does not is carried by what is common to a story (the generalized track). A model using
listener features (mouth width, smile) should clearly beat one using speaker features.
:func:`plan_session` regenerates every per-frame latent signal from the seed.

**Observer ratings, the planted agreement.** ``valence_observer_listener`` is what a third
person watching the listener would rate: the self-rating averaged over 2 s, 1 s later,
rescaled per listener (``observer_scale`` 0.6-0.9, ``observer_offset`` -0.05-0.10) plus slow
(sd 0.06) and white (sd 0.03) noise, so it agrees well but not perfectly with the
self-rating (CCC about 0.5-0.8 per session; the build's README lists the numbers).
``valence_observer_speaker`` rates the speaker: ``0.05 + 0.6 * affect`` smoothed over 1 s,
0.5 s later, plus noise, so it agrees with the self-rating only through the text term (CCC
about 0.05-0.5).

**Determinism.** Everything random comes from ``numpy.random.SeedSequence([seed, ...])``
keyed by listener, speaker and session, so one session's files do not depend on which
other sessions are built. The same seed and arguments give byte-identical CSVs,
``demo_truth.json`` and README, and identical decoded frames. The MP4 bytes are identical
too with the same FFmpeg/x264 build (x264 runs single-threaded); another build of the
encoder may write different bytes that decode to nearly the same pictures.

**Cost.** The default corpus (6 listeners x stories 1-6, so two test stories per listener,
x 24 s: 36 sessions, 21,600 frames) takes about 47 s on one core, two thirds of it in x264
(words, transcripts and observer ratings add milliseconds); ``build_demo(tmp, n_listeners=2,
stories=(1, 2), duration_s=6)`` takes a few seconds (most of it loading dlib's landmark model once).

**Modules.** :mod:`~featurestore.demo.model` (the planted constants, per-person parameters,
story curves), :mod:`~featurestore.demo.face` (face rig and warping),
:mod:`~featurestore.demo.voice` (voice synthesis), :mod:`~featurestore.demo.plan` (one
session's latent signals and labels), :mod:`~featurestore.demo.files` (CSV, transcript and
video writers), :mod:`~featurestore.demo.build` (the corpus). :mod:`~featurestore.demo.monadic` builds a
second corpus in another layout (one person per session, media per person, two raters, a
manifest; ``featurestore demo --layout monadic``). The names below are importable
from ``featurestore.demo``.
"""

from .build import DemoInfo, build_demo
from .face import FaceRig, Look, face_rig, piecewise_affine_map
from .files import transcript_cues, transcript_srt, valence_csv
from .model import (
    AUDIO_RATE,
    BLINK_LEVELS,
    BROW_LEVELS,
    GENERATOR_VERSION,
    LABEL_DELAY_S,
    MOUTH_LEVELS,
    NEGATIVE_WORDS,
    NEUTRAL_WORDS,
    POSITIVE_WORDS,
    SMILE_LEVELS,
    ListenerParams,
    SpeakerParams,
    listener_params,
    speaker_params,
    story_curve,
)
from .monadic import MonadicDemoInfo, build_monadic_demo, plan_monadic
from .plan import SessionPlan, plan_session

__all__ = [
    "AUDIO_RATE",
    "BLINK_LEVELS",
    "BROW_LEVELS",
    "GENERATOR_VERSION",
    "LABEL_DELAY_S",
    "MOUTH_LEVELS",
    "NEGATIVE_WORDS",
    "NEUTRAL_WORDS",
    "POSITIVE_WORDS",
    "SMILE_LEVELS",
    "DemoInfo",
    "MonadicDemoInfo",
    "FaceRig",
    "ListenerParams",
    "Look",
    "SessionPlan",
    "SpeakerParams",
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
