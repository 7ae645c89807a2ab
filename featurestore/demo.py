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
of x = 1080/2560 of the width, as :func:`featurestore.media.role_regions` splits) is a
mirrored, colour-shifted copy; each listener (right) has their own tint. Expressions are
piecewise-affine warps (the model of ``skimage.transform.PiecewiseAffineTransform``,
evaluated in one vectorised pass by :func:`piecewise_affine_map`) of the 68 dlib landmarks
of the photo plus a ring of fixed border points, rendered once per state and reused: 7 smile levels (lip corners out and up, cheeks up), 4 mouth-opening levels (lower
lip and jaw down), 3 blink levels and a brow raise. The upper face (brows, eyes) and the
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
x 24 s: 36 sessions, 21,600 frames) takes about 47 s on one core, two thirds of it in x264 (words, transcripts and observer ratings add milliseconds); ``build_demo(tmp, n_listeners=2, stories=(1, 2),
duration_s=6)`` takes a few seconds (most of it loading dlib's landmark model once).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np

from .manifest import STORY_SPEAKER
from .media import role_regions
from .store import session_name

#: Bumped whenever the same seed would produce different files.
GENERATOR_VERSION = 3
AUDIO_RATE = 44100
#: The listener's smile at time t shows in the valence at t + LABEL_DELAY_S.
LABEL_DELAY_S = 1.5
SPEAKER_TERM_WEIGHT = 0.05
SPEAKER_TERM_WINDOW_S = 3.0
LABEL_SLOW_NOISE_SD = 0.03
LABEL_WHITE_NOISE_SD = 0.01
#: The valence's text term: TEXT_TERM_WEIGHT * (affect of what the speaker says, smoothed causally over TEXT_TERM_TAU_S).
TEXT_TERM_WEIGHT = 0.2
#: the story's common affect curve c_S(t): smooth noise (time scale in s) of this sd, clipped to [-1, 1]
STORY_CURVE_SD = 0.55
STORY_CURVE_TIME_S = 2.5
#: how much a listener's smile follows the story curve (times the listener's story sign)
STORY_SMILE_WEIGHT = 0.45
#: how the speaker's phrase affect follows the story curve: a_p = clip(w * c_S(start) + N(0, sd))
STORY_AFFECT_WEIGHT = 0.8
PHRASE_AFFECT_SD = 0.3
TEXT_TERM_TAU_S = 2.0
#: Observer of the listener: their rating follows the self-rating smoothed over 2 s and 1 s later.
OBSERVER_LISTENER_SMOOTH_S = 2.0
OBSERVER_LISTENER_DELAY_S = 1.0
OBSERVER_LISTENER_NOISE_SD = (0.06, 0.03)  # slow, white
#: Observer of the speaker: their rating follows the affect of the speaker's words, smoothed over 1 s, 0.5 s later.
OBSERVER_SPEAKER_TAU_S = 1.0
OBSERVER_SPEAKER_DELAY_S = 0.5
OBSERVER_SPEAKER_GAIN = 0.6
OBSERVER_SPEAKER_NOISE_SD = (0.06, 0.02)

#: Words of the speaker's phrases: every word in the first two lists is in the VADER lexicon
#: (valence > 0 and < 0), no word of the third is, nor is it a VADER negation or booster.
POSITIVE_WORDS = ("happy", "great", "love", "wonderful", "fun", "beautiful", "amazing", "laughed", "glad",
                  "best", "funny", "proud", "lucky", "nice", "smiled")
NEGATIVE_WORDS = ("sad", "terrible", "lost", "hurt", "cried", "awful", "bad", "angry", "lonely", "worried",
                  "pain", "sick", "died", "scared", "alone")
NEUTRAL_WORDS = ("then", "we", "went", "to", "the", "house", "and", "my", "brother", "it", "was", "a", "day",
                 "at", "school", "in", "summer", "car", "walked", "home", "said", "that", "morning", "city",
                 "old", "door", "after", "dinner", "mother", "train", "letter", "street", "her", "his",
                 "window", "week", "father", "teacher", "village", "river", "told", "us", "one", "evening")
#: The listener's backchannel word after a phrase of affect a: "wow" if a > 0.35, "oh no" if a < -0.35, else "mm-hm".
BACKCHANNEL_WORDS = {"positive": "wow", "negative": "oh no", "neutral": "mm-hm"}
BACKCHANNEL_AFFECT = 0.35

#: Warp parameter of each rendered smile state: 0 is the photo (already smiling), -0.5 a weaker smile, 1.5 a broad one.
SMILE_LEVELS = tuple(float(v) for v in np.linspace(-0.5, 1.5, 7))
#: Mouth opening of each rendered state (0 = the photo, 1 = lower lip down ~0.22 interocular).
MOUTH_LEVELS = (0.0, 0.4, 0.7, 1.0)
#: Upper-lid closure of each rendered state (1 = closed).
BLINK_LEVELS = (0.0, 0.5, 1.0)
#: Brow raise of each rendered state (1 = up ~0.1 interocular).
BROW_LEVELS = (0.0, 1.0)
SPEAKER_SMILE_STATE = 2  # a = 0.17, close to the photo's own smile
SPEAKER_STORY_SMILE_STATES = 2.0  # the speaker's smile state moves this many levels per unit of story curve
BACKCHANNEL_MOUTH_STATE = 1

# skimage.data.astronaut() rows/cols holding the head, and the upscaling factor
_PHOTO_ROWS = (30, 200)
_PHOTO_COLS = (125, 335)
_PHOTO_SCALE = 2
_FEATHER_PX = 20
_BLINK_SEQUENCE = (1, 2, 2, 1)  # blink states of the frames of one blink


# ----------------------------------------------------------------------------- face rig


def piecewise_affine_map(out_points: np.ndarray, in_points: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Inverse map of a piecewise-affine warp, for ``cv2.remap``: output pixel -> input (x, y).

    The model of ``skimage.transform.PiecewiseAffineTransform`` (a Delaunay triangulation of
    ``out_points``, one affine map per triangle onto ``in_points``), evaluated for all pixels of
    a ``shape`` = (height, width) image in one vectorised pass instead of one pass per
    triangle (tens of milliseconds per state instead of about half a second); the tests check
    that both give the same map. Pixels outside the triangulation map to themselves.
    """
    import cv2
    from scipy.spatial import Delaunay

    h, w = shape
    out_points = np.asarray(out_points, np.float64)
    in_points = np.asarray(in_points, np.float64)
    simplices = Delaunay(out_points).simplices
    corners = np.concatenate([out_points[simplices], np.ones((len(simplices), 3, 1))], axis=2)
    # barycentric coordinates of (x, y, 1) in triangle k: (x, y, 1) @ to_bary[k]
    to_bary = np.linalg.inv(corners)
    # each pixel's triangle, by rasterising the triangles, the largest last (painting is far
    # faster than a point location per pixel); pixels a thin triangle's outline claimed
    # wrongly are re-assigned below
    area = np.abs(np.linalg.det(corners))
    label = np.full((h, w), -1, np.int32)
    for k in np.argsort(area, kind="stable"):
        cv2.fillConvexPoly(label, np.round(out_points[simplices[k]] * 16).astype(np.int32), int(k), cv2.LINE_8, 4)
    yy, xx = np.mgrid[0:h, 0:w]
    xy1 = np.c_[xx.ravel(), yy.ravel(), np.ones(h * w)]
    tri = label.ravel()
    inside = tri >= 0
    bary = np.zeros((h * w, 3))
    bary[inside] = np.einsum("ni,nij->nj", xy1[inside], to_bary[tri[inside]])
    bad = np.flatnonzero(inside & (bary.min(axis=1) < -1e-6))
    if len(bad):
        all_bary = np.einsum("ni,kij->nkj", xy1[bad], to_bary)  # (n_bad, n_triangles, 3)
        best = all_bary.min(axis=2).argmax(axis=1)
        tri[bad] = best
        bary[bad] = all_bary[np.arange(len(bad)), best]
    src = xy1[:, :2].copy()  # pixels outside every triangle map to themselves
    src[inside] = np.einsum("nj,njc->nc", bary[inside], in_points[simplices[tri[inside]]])
    return src[:, 0].reshape(h, w).astype(np.float32), src[:, 1].reshape(h, w).astype(np.float32)


def _border_points(width: int, height: int, spacing: float = 20.0) -> np.ndarray:
    """Points along the border of a ``width`` x ``height`` box (pixel centres), corners included."""
    nx = max(2, int(np.ceil((width - 1) / spacing)) + 1)
    ny = max(2, int(np.ceil((height - 1) / spacing)) + 1)
    xs = np.linspace(0, width - 1, nx)
    ys = np.linspace(0, height - 1, ny)[1:-1]
    return np.concatenate([
        np.c_[xs, np.zeros(nx)], np.c_[xs, np.full(nx, height - 1.0)],
        np.c_[np.zeros(len(ys)), ys], np.c_[np.full(len(ys), width - 1.0), ys],
    ])


def _even(v: float) -> int:
    return int(2 * round(v / 2))


class FaceRig:
    """Expression states of one face photo, each rendered once by a piecewise-affine warp.

    ``landmarks`` are the 68 dlib points of ``tile`` (x, y in pixels). The upper band
    (brows, eyes; above the nose tip) and the lower band (nose tip down: mouth, jaw,
    cheeks) are warped separately, each with a ring of fixed points on its border, so the
    two bands always join seamlessly and :meth:`render` combines any upper and lower state.
    """

    def __init__(self, tile: np.ndarray, landmarks: np.ndarray) -> None:
        self.tile = np.ascontiguousarray(tile, dtype=np.uint8)
        p = np.asarray(landmarks, dtype=np.float64)
        if p.shape != (68, 2):
            raise ValueError(f"demo face: expected (68, 2) landmarks, got {p.shape}")
        self.landmarks = p
        h, w = self.tile.shape[:2]
        self.iod = float(np.linalg.norm(p[45] - p[36]))
        self.mouth_width = float(np.linalg.norm(p[54] - p[48]))
        # cheek control points, halfway between the jaw and the lip corners
        cheeks = np.array([(p[3] + p[48]) / 2, (p[13] + p[54]) / 2])
        self.control = np.vstack([p, cheeks])
        cut = _even(p[30, 1])
        x0 = max(0, _even(p[:, 0].min() - 0.35 * self.iod))
        x1 = min(w, _even(p[:, 0].max() + 0.35 * self.iod))
        y0 = max(0, _even(p[17:27, 1].min() - 0.5 * self.iod))
        self.upper_region = (x0, y0, x1, cut)
        self.lower_region = (x0, cut, x1, h)
        self._upper: dict[tuple[int, int], np.ndarray] = {}
        self._lower: dict[tuple[int, int], np.ndarray] = {}

    @classmethod
    def from_photo(cls) -> FaceRig:
        """The rig of the astronaut portrait in scikit-image (public domain, NASA)."""
        import cv2
        from skimage import data

        from .extractors.landmarks import DlibLandmarker

        crop = data.astronaut()[slice(*_PHOTO_ROWS), slice(*_PHOTO_COLS)]
        tile = cv2.resize(crop, None, fx=_PHOTO_SCALE, fy=_PHOTO_SCALE, interpolation=cv2.INTER_CUBIC)
        points = DlibLandmarker(detect_scale=0.5).detect(tile)
        if points is None:
            raise RuntimeError(
                "demo face: dlib found no face in skimage.data.astronaut(); check the dlib and "
                "face-recognition-models installation (pip install dlib-bin face-recognition-models)"
            )
        return cls(tile, points)

    # --- deformations (targets of the control points) ---

    def lower_targets(self, smile: float, mouth: float) -> np.ndarray:
        """Control points moved for a smile (0 = the photo, > 0 broader, < 0 weaker) and a mouth opening (0..1)."""
        d = self.control.copy()
        sx, sy = smile * 0.11 * self.mouth_width, -smile * 0.09 * self.mouth_width
        weights = {48: 1.0, 49: 0.5, 59: 0.5, 60: 0.6, 50: 0.2, 58: 0.2, 61: 0.25, 67: 0.25}
        for left, w in weights.items():
            right = {48: 54, 49: 53, 59: 55, 60: 64, 50: 52, 58: 56, 61: 63, 67: 65}[left]
            d[left] += (-sx * w, sy * w)
            d[right] += (sx * w, sy * w)
        d[68] += (-0.03 * smile * self.mouth_width, -0.05 * smile * self.mouth_width)
        d[69] += (0.03 * smile * self.mouth_width, -0.05 * smile * self.mouth_width)
        jaw = mouth * 0.22 * self.iod
        drop = {65: 1.0, 66: 1.0, 67: 1.0, 56: 1.0, 57: 1.0, 58: 1.0, 55: 0.6, 59: 0.6,
                48: 0.15, 54: 0.15, 60: 0.1, 64: 0.1, 8: 0.55, 7: 0.5, 9: 0.5, 6: 0.35,
                10: 0.35, 5: 0.2, 11: 0.2, 4: 0.08, 12: 0.08}
        for i, w in drop.items():
            d[i, 1] += w * jaw
        return d

    def upper_targets(self, brow: float, blink: float) -> np.ndarray:
        """Control points moved for a brow raise (0..1) and an eye closure (0..1)."""
        p = self.control
        d = p.copy()
        d[17:27, 1] -= brow * 0.10 * self.iod
        d[[37, 38, 43, 44], 1] -= brow * 0.02 * self.iod
        for upper, lower in ((37, 41), (38, 40), (43, 47), (44, 46)):
            d[upper] += blink * 0.85 * (p[lower] - d[upper])
            d[lower, 1] -= blink * 0.1 * (p[lower, 1] - p[upper, 1])
        return d

    def _warp(self, region: tuple[int, int, int, int], targets: np.ndarray) -> np.ndarray:
        import cv2

        x0, y0, x1, y1 = region
        sub = self.tile[y0:y1, x0:x1]
        off = np.array([x0, y0], dtype=np.float64)
        src = self.control - off
        dst = targets - off
        w, h = x1 - x0, y1 - y0
        margin = 3.0
        inside = (
            (src[:, 0] > margin) & (src[:, 0] < w - 1 - margin)
            & (src[:, 1] > margin) & (src[:, 1] < h - 1 - margin)
        )
        ring = _border_points(w, h)
        dst_in = np.clip(dst[inside], margin, [w - 1 - margin, h - 1 - margin])
        # the inverse map: output (deformed) coordinates -> input (photo) coordinates
        mx, my = piecewise_affine_map(np.vstack([dst_in, ring]), np.vstack([src[inside], ring]), (h, w))
        return cv2.remap(np.ascontiguousarray(sub), mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)

    def upper(self, brow: int, blink: int) -> np.ndarray:
        """The upper band for state indices into :data:`BROW_LEVELS` and :data:`BLINK_LEVELS`."""
        key = (int(brow), int(blink))
        if key not in self._upper:
            x0, y0, x1, y1 = self.upper_region
            if key == (0, 0):
                self._upper[key] = self.tile[y0:y1, x0:x1].copy()
            else:
                targets = self.upper_targets(BROW_LEVELS[key[0]], BLINK_LEVELS[key[1]])
                self._upper[key] = self._warp(self.upper_region, targets)
        return self._upper[key]

    def lower(self, smile: int, mouth: int) -> np.ndarray:
        """The lower band for state indices into :data:`SMILE_LEVELS` and :data:`MOUTH_LEVELS`."""
        key = (int(smile), int(mouth))
        if key not in self._lower:
            x0, y0, x1, y1 = self.lower_region
            targets = self.lower_targets(SMILE_LEVELS[key[0]], MOUTH_LEVELS[key[1]])
            if np.allclose(targets, self.control):
                self._lower[key] = self.tile[y0:y1, x0:x1].copy()
            else:
                band = self._warp(self.lower_region, targets)
                if MOUTH_LEVELS[key[1]] > 0:
                    closed = self.lower_targets(SMILE_LEVELS[key[0]], 0.0)
                    band = self._paint_mouth_cavity(band, closed, targets, (x0, y0))
                self._lower[key] = band
        return self._lower[key]

    @staticmethod
    def _paint_mouth_cavity(band: np.ndarray, closed: np.ndarray, opened: np.ndarray, origin) -> np.ndarray:
        """Darken what the lower lip uncovered (the warp alone would stretch the teeth)."""
        import cv2

        inner_lower = [60, 67, 66, 65, 64]
        poly = np.vstack([opened[inner_lower], closed[inner_lower[::-1]]]) - np.asarray(origin, float)
        mask = np.zeros(band.shape[:2], np.float32)
        cv2.fillPoly(mask, [np.round(poly * 4).astype(np.int32)], 1.0, lineType=cv2.LINE_AA, shift=2)
        mask = cv2.GaussianBlur(mask, (5, 5), 1.0)[..., None]
        cavity = np.array([62, 24, 28], np.float32)  # dark red-brown of an open mouth
        return np.clip(band * (1 - 0.9 * mask) + cavity * 0.9 * mask + 0.5, 0, 255).astype(np.uint8)

    def render(self, smile: int = SPEAKER_SMILE_STATE, mouth: int = 0, blink: int = 0, brow: int = 0) -> np.ndarray:
        """The whole face tile (RGB uint8) in one expression state (indices into the *_LEVELS)."""
        out = self.tile.copy()
        x0, y0, x1, y1 = self.upper_region
        out[y0:y1, x0:x1] = self.upper(brow, blink)
        x0, y0, x1, y1 = self.lower_region
        out[y0:y1, x0:x1] = self.lower(smile, mouth)
        return out


@lru_cache(maxsize=1)
def face_rig() -> FaceRig:
    """The astronaut rig, built once per process (landmark detection, then warps on demand)."""
    return FaceRig.from_photo()


@dataclass(frozen=True)
class Look:
    """How one person's copy of the face appears: mirroring, colour gains, background."""

    mirror: bool
    gain: tuple[float, float, float]  # per RGB channel

    def background(self, tile: np.ndarray) -> np.ndarray:
        """Background colour (RGB uint8): the photo's wall colour, tinted like the face."""
        border = np.concatenate([tile[:8].reshape(-1, 3), tile[:, :8].reshape(-1, 3), tile[:, -8:].reshape(-1, 3)])
        return np.clip(np.median(border, axis=0) * np.array(self.gain), 0, 255).astype(np.uint8)


class _TileCache:
    """Dressed tiles (mirrored, tinted, feathered into the background) as I420 planes, per state."""

    def __init__(self, rig: FaceRig, look: Look, size: tuple[int, int]) -> None:
        self.rig, self.look = rig, look
        self.h, self.w = size
        self.bg = look.background(rig.tile)
        th, tw = rig.tile.shape[:2]
        ay = np.clip(np.minimum(np.arange(self.h), self.h - 1 - np.arange(self.h)) / _FEATHER_PX, 0, 1)
        ax = np.clip(np.minimum(np.arange(self.w), self.w - 1 - np.arange(self.w)) / _FEATHER_PX, 0, 1)
        a = (ay[:, None] * ax[None, :]) ** 1.5
        self.alpha = (a * a * (3 - 2 * a))[..., None].astype(np.float32)  # smoothstep
        self._tiles: dict[tuple[int, int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._resize = (th, tw) != (self.h, self.w)

    def get(self, state: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        planes = self._tiles.get(state)
        if planes is None:
            import cv2

            rgb = self.rig.render(*state)
            if self._resize:
                rgb = cv2.resize(rgb, (self.w, self.h), interpolation=cv2.INTER_AREA)
            if self.look.mirror:
                rgb = rgb[:, ::-1]
            tinted = rgb.astype(np.float32) * np.array(self.look.gain, dtype=np.float32)
            dressed = self.alpha * tinted + (1 - self.alpha) * self.bg.astype(np.float32)
            dressed = np.ascontiguousarray(np.clip(dressed + 0.5, 0, 255).astype(np.uint8))
            i420 = cv2.cvtColor(dressed, cv2.COLOR_RGB2YUV_I420)
            h, w = self.h, self.w
            y = i420[:h]
            u = i420[h : h + h // 4].reshape(h // 2, w // 2)
            v = i420[h + h // 4 :].reshape(h // 2, w // 2)
            planes = (y.copy(), u.copy(), v.copy())
            self._tiles[state] = planes
        return planes


# ----------------------------------------------------------------------------- parameters


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), *[int(k) for k in key]]))


@dataclass(frozen=True)
class ListenerParams:
    """Per-listener latent parameters (all drawn from the seed)."""

    listener: int
    valence_offset: float  # added to every valence value
    valence_gain: float  # valence per unit of smile
    smile_baseline: float  # resting smile, 0..1
    smile_event_rate_hz: float  # smile events per second
    smile_event_size: float  # scales the event amplitudes (expressivity)
    backchannel_f0_hz: float
    backchannel_level: float  # peak amplitude of the backchannel audio
    tint: tuple[float, float, float]
    observer_offset: float  # the observer of this listener rates offset + scale * (smoothed, delayed self-rating)
    observer_scale: float
    story_sign: int = 1  # +1: feels with the story's common curve; -1: against it (planted for listeners 2, 7, ...)


@dataclass(frozen=True)
class SpeakerParams:
    """Per-speaker voice and look."""

    speaker: int
    f0_hz: float  # mean fundamental frequency of the voice
    formant_scale: float  # vocal-tract length factor on the formant frequencies
    speech_level: float  # peak amplitude of the speech
    tint: tuple[float, float, float]


def listener_params(listener: int, seed: int = 0) -> ListenerParams:
    """The latent parameters of listener ``listener`` under ``seed``."""
    r = _rng(seed, 1, listener)
    return ListenerParams(
        listener=int(listener),
        valence_offset=round(float(r.uniform(-0.35, 0.15)), 4),
        valence_gain=round(float(r.uniform(0.6, 1.2)), 4),
        smile_baseline=round(float(r.uniform(0.35, 0.50)), 4),
        smile_event_rate_hz=round(float(r.uniform(1 / 9, 1 / 5)), 4),
        smile_event_size=round(float(r.uniform(0.6, 1.0)), 4),
        backchannel_f0_hz=round(float(r.uniform(200.0, 240.0)), 2),
        backchannel_level=round(float(r.uniform(0.25, 0.35)), 3),
        tint=tuple(round(float(v), 3) for v in r.uniform(0.88, 1.12, 3)),
        observer_offset=round(float(r.uniform(-0.05, 0.10)), 4),
        observer_scale=round(float(r.uniform(0.6, 0.9)), 4),
        story_sign=-1 if int(listener) % 5 == 2 else 1,
    )


def story_curve(story: int, t: np.ndarray, seed: int = 0) -> np.ndarray:
    """The story's common affect curve c_S(t) in [-1, 1] at times ``t`` (s): what every telling of
    story ``story`` carries, whoever listens (smooth noise on a 10 Hz grid over 0-600 s)."""
    r = _rng(seed, 6, story)
    grid_fps = 10.0
    grid = -5.0 + np.arange(int(605 * grid_fps)) / grid_fps
    curve = np.clip(STORY_CURVE_SD * _smooth_noise(r, len(grid), STORY_CURVE_TIME_S * grid_fps), -1.0, 1.0)
    return np.interp(t, grid, curve)


def speaker_params(speaker: int, seed: int = 0) -> SpeakerParams:
    """The voice and look of speaker ``speaker`` under ``seed``."""
    r = _rng(seed, 2, speaker)
    high = speaker % 2 == 0
    return SpeakerParams(
        speaker=int(speaker),
        f0_hz=round(float((175.0 if high else 125.0) + r.uniform(-8, 8)), 2),
        formant_scale=round(float((1.12 if high else 1.0) * r.uniform(0.97, 1.03)), 4),
        speech_level=round(float(r.uniform(0.45, 0.55)), 3),
        tint=tuple(round(float(v), 3) for v in (np.array([0.85, 0.95, 1.12]) * r.uniform(0.93, 1.07, 3))),
    )


# ----------------------------------------------------------------------------- audio

# (F1, F2, F3) in Hz of five vowels (a, e, i, o, u), adult male values
_VOWELS = np.array([(730, 1090, 2440), (530, 1840, 2480), (270, 2290, 3010), (570, 840, 2410), (300, 870, 2240)], float)
_FORMANT_BW = (80.0, 100.0, 160.0)


@lru_cache(maxsize=1)
def _glottal_table(size: int = 4096, harmonics: int = 40) -> np.ndarray:
    """One period of a band-limited glottal source: harmonics falling 6 dB/octave."""
    ph = np.arange(size) * 2 * np.pi / size
    k = np.arange(1, harmonics + 1)[:, None]
    wave = (np.sin(k * ph) / k).sum(axis=0)
    return wave / np.abs(wave).max()


def _voiced_source(f0: np.ndarray, sr: int) -> np.ndarray:
    """Glottal source following the F0 track ``f0`` (Hz per sample) by wavetable lookup."""
    table = _glottal_table()
    phase = np.cumsum(f0 / sr) % 1.0
    return np.interp(phase * len(table), np.arange(len(table) + 1), np.append(table, table[0]))


def _resonators(x: np.ndarray, freqs: Sequence[float], bws: Sequence[float], sr: int) -> np.ndarray:
    """Cascade of Klatt second-order resonators (unity gain at 0 Hz)."""
    from scipy.signal import lfilter

    for f, bw in zip(freqs, bws, strict=True):
        c = -np.exp(-2 * np.pi * bw / sr)
        b = 2 * np.exp(-np.pi * bw / sr) * np.cos(2 * np.pi * f / sr)
        x = lfilter([1 - b - c], [1, -b, -c], x)
    return x


def _ramp_envelope(n: int, attack: int, release: int) -> np.ndarray:
    env = np.ones(n)
    a, r = min(attack, n // 2), min(release, n // 2)
    if a:
        env[:a] = 0.5 - 0.5 * np.cos(np.pi * np.arange(a) / a)
    if r:
        env[n - r :] = 0.5 + 0.5 * np.cos(np.pi * (np.arange(r) + 1) / r)
    return env


# ----------------------------------------------------------------------------- session plan


@dataclass
class SessionPlan:
    """Every latent signal of one session, per video frame (and the audio per sample).

    States are indices into :data:`SMILE_LEVELS`, :data:`MOUTH_LEVELS`, :data:`BLINK_LEVELS`
    and :data:`BROW_LEVELS`; offsets are head translations in pixels (x, y).
    """

    listener: int
    story: int
    speaker: int
    fps: float
    n_frames: int
    phrases: list[tuple[float, float]]  # speaker speech, seconds
    syllables: list[dict]  # t0, t1 (s), vowel, accent
    backchannels: list[tuple[float, float]]  # listener "mm-hm", seconds
    smile_events: list[dict]  # onset_s, amplitude, rise_s, hold_s, decay_s
    blinks: dict[str, list[float]]  # role -> blink onsets, seconds
    smile: np.ndarray  # latent listener smile at frame times, 0..1
    smile_delayed: np.ndarray  # smile(t - LABEL_DELAY_S)
    speech_envelope: np.ndarray  # speaker loudness per frame, 0..1
    speaker_term: np.ndarray  # the valence's speaker-voice term per frame
    valence: np.ndarray  # the label per frame, [-1, 1]
    states: dict[str, dict[str, np.ndarray]]  # role -> smile/mouth/blink/brow -> int per frame
    offsets: dict[str, np.ndarray]  # role -> (n_frames, 2) int head translation, pixels
    audio: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.float32))
    audio_rate: int = AUDIO_RATE
    phrase_affect: list[float] = field(default_factory=list)  # affect of each phrase's words, -1..1
    phrase_words: list[str] = field(default_factory=list)  # what the speaker says in each phrase
    backchannel_words: list[str] = field(default_factory=list)  # what the listener says in each backchannel
    affect: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # latest phrase's affect, held, per frame
    text_term: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # the valence's text term per frame
    observer_listener: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # per frame, [-1, 1]
    observer_speaker: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # per frame, [-1, 1]

    @property
    def times(self) -> np.ndarray:
        """Frame times in seconds (frame index / fps)."""
        return np.arange(self.n_frames) / self.fps


def _smooth_noise(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    """Gaussian-filtered white noise of ``n`` samples with unit standard deviation."""
    from scipy.ndimage import gaussian_filter1d

    # long kernels: filter on a coarser grid (4 points per sigma) and interpolate
    step = max(1, int(sigma // 4))
    m = -(-n // step) + 1
    pad = int(3 * sigma / step) + 1
    coarse = gaussian_filter1d(rng.standard_normal(m + 2 * pad), sigma / step)[pad : pad + m]
    x = coarse if step == 1 else np.interp(np.arange(n) / step, np.arange(m), coarse)
    x = x[:n]
    sd = x.std()
    return x / sd if sd > 0 else x


def _speech_schedule(rng: np.random.Generator, duration_s: float):
    """Phrases, syllables and backchannel slots of one session."""
    phrases, syllables, backchannels = [], [], []
    t = float(rng.uniform(0.3, 0.8))
    while True:
        dur = min(float(rng.uniform(1.2, 3.5)), duration_s - 0.3 - t)
        if dur < 0.6:
            break
        end = t + dur
        phrases.append((round(t, 4), round(end, 4)))
        s = t
        first = True
        while s < end - 0.1:
            d = min(float(rng.uniform(0.13, 0.26)), end - s)
            syllables.append({
                "t0": round(s, 4), "t1": round(s + d, 4), "vowel": int(rng.integers(len(_VOWELS))),
                "accent": bool(rng.random() < (0.45 if first else 0.15)),
                "amp": round(float(rng.uniform(0.6, 1.0)), 3), "fricative": bool(rng.random() < 0.3),
            })
            first = False
            s += d + (0.0 if rng.random() < 0.6 else float(rng.uniform(0.03, 0.08)))
        backchannel = not backchannels or rng.random() < 0.35
        pause = float(rng.uniform(1.1, 1.5) if backchannel else rng.uniform(0.35, 1.0))
        if backchannel and end + pause <= duration_s - 0.1:
            b0 = end + float(rng.uniform(0.25, pause - 0.75))
            backchannels.append((round(b0, 4), round(b0 + 0.5, 4)))
        t = end + pause
    return phrases, syllables, backchannels


def _synth_speech(plan_syllables, phrases, sp: SpeakerParams, rng, n_samples: int, sr: int) -> np.ndarray:
    """The speaker's voice: per phrase an F0 contour, a glottal source, one vowel per syllable."""
    from scipy.signal import butter, lfilter

    hiss_b, hiss_a = butter(2, 3000 / (sr / 2), "high")
    out = np.zeros(n_samples)
    for p0, p1 in phrases:
        a, b = int(p0 * sr), min(n_samples, int(p1 * sr) + int(0.05 * sr))
        u = np.linspace(0, 1, b - a)
        f0 = sp.f0_hz * (1.10 - 0.22 * u)  # declination
        if rng.random() < 0.25:  # final rise (a question)
            f0 *= 1 + 0.25 * np.clip((u - 0.85) / 0.15, 0, 1)
        f0 *= 1 + 0.01 * _smooth_noise(rng, b - a, 0.02 * sr)
        tt = np.arange(a, b) / sr
        for syl in plan_syllables:
            if syl["accent"] and p0 <= syl["t0"] < p1:
                mid = (syl["t0"] + syl["t1"]) / 2
                f0 *= 1 + 0.18 * np.exp(-0.5 * ((tt - mid) / 0.08) ** 2)
        src = _voiced_source(f0, sr)
        for syl in plan_syllables:
            if not p0 <= syl["t0"] < p1:
                continue
            s0, s1 = int(syl["t0"] * sr), min(b, int(syl["t1"] * sr))
            if s1 - s0 < 16:
                continue
            env = _ramp_envelope(s1 - s0, int(0.025 * sr), int(0.04 * sr)) * syl["amp"] * (1.3 if syl["accent"] else 1.0)
            seg = np.concatenate([src[s0 - a : s1 - a] * env, np.zeros(int(0.03 * sr))])
            voiced = _resonators(seg, _VOWELS[syl["vowel"]] * sp.formant_scale, _FORMANT_BW, sr)
            end = min(n_samples, s0 + len(voiced))
            out[s0:end] += voiced[: end - s0]
            if syl["fricative"]:  # a short /s/-like noise before the vowel
                n = int(0.05 * sr)
                h0 = max(0, s0 - n)
                noise = lfilter(hiss_b, hiss_a, rng.standard_normal(s0 - h0)) * _ramp_envelope(s0 - h0, n // 3, n // 3)
                out[h0:s0] += 0.08 * noise
    peak = np.abs(out).max()
    return out * (sp.speech_level / peak) if peak > 0 else out


def _synth_backchannel(b0: float, lp: ListenerParams, n_samples: int, sr: int) -> np.ndarray:
    """The listener's "mm-hm" at ``b0`` seconds: a 180 ms falling and a 240 ms rising nasal burst."""
    out = np.zeros(n_samples)
    for start, dur, f_from, f_to, amp in ((0.0, 0.18, 1.0, 0.95, 1.0), (0.26, 0.24, 0.95, 1.12, 0.8)):
        a = int((b0 + start) * sr)
        n = min(int(dur * sr), n_samples - a)
        if n < 16:
            continue
        f0 = lp.backchannel_f0_hz * np.linspace(f_from, f_to, n)
        src = _voiced_source(f0, sr) * _ramp_envelope(n, int(0.03 * sr), int(0.04 * sr))
        seg = _resonators(np.concatenate([src, np.zeros(int(0.03 * sr))]), (250, 1100, 2300), (60, 150, 200), sr)
        end = min(n_samples, a + len(seg))
        out[a:end] += amp * seg[: end - a]
    peak = np.abs(out).max()
    return out * (lp.backchannel_level / peak) if peak > 0 else out


def _smile_curve(t: np.ndarray, events: list[dict]) -> np.ndarray:
    """Sum of raised-cosine rise / hold / raised-cosine decay events at times ``t`` (s)."""
    y = np.zeros_like(t)
    for e in events:
        u = t - e["onset_s"]
        rise, hold, decay = e["rise_s"], e["hold_s"], e["decay_s"]
        shape = np.where(u < rise, 0.5 - 0.5 * np.cos(np.pi * np.clip(u / rise, 0, 1)), 1.0)
        shape = np.where(u > rise + hold, 0.5 + 0.5 * np.cos(np.pi * np.clip((u - rise - hold) / decay, 0, 1)), shape)
        shape = np.where((u < 0) | (u > rise + hold + decay), 0.0, shape)
        y += e["amplitude"] * shape
    return y


def _blink_onsets(rng: np.random.Generator, duration_s: float) -> list[float]:
    out, t = [], float(rng.uniform(0.5, 3.0))
    while t < duration_s - 0.3:
        out.append(round(t, 3))
        t += float(rng.uniform(2.0, 6.0))
    return out


def _head_motion(rng, n: int, fps: float, amplitude: tuple[float, float]) -> np.ndarray:
    """Smooth random head translation, even pixels (chroma planes stay aligned)."""
    xy = np.stack([_smooth_noise(rng, n, 0.6 * fps) * amplitude[0], _smooth_noise(rng, n, 0.8 * fps) * amplitude[1]], axis=1)
    return xy


def _quantize_even(xy: np.ndarray, limit: tuple[int, int]) -> np.ndarray:
    out = 2 * np.round(xy / 2)
    out[:, 0] = np.clip(out[:, 0], -limit[0], limit[0])
    out[:, 1] = np.clip(out[:, 1], -limit[1], limit[1])
    return out.astype(np.int64)


def _causal_smooth(x: np.ndarray, tau_s: float, fps: float) -> np.ndarray:
    """First-order causal low-pass (exponential moving average, time constant ``tau_s`` seconds)."""
    from scipy.signal import lfilter

    if len(x) == 0:
        return np.asarray(x, np.float64)
    alpha = 1.0 - np.exp(-1.0 / (tau_s * fps))
    y, _ = lfilter([alpha], [1.0, alpha - 1.0], x, zi=[(1.0 - alpha) * x[0]])  # starts at x[0]
    return y


def _delayed(x: np.ndarray, delay_s: float, fps: float) -> np.ndarray:
    """``x(t - delay_s)`` per frame; the first value is held before the start."""
    d = int(round(delay_s * fps))
    return np.concatenate([np.full(min(d, len(x)), x[0] if len(x) else 0.0), x[: len(x) - d]]) if d else x.copy()


def _phrase_words(rng: np.random.Generator, phrases, syllables, curve_at_start) -> tuple[list[float], list[str]]:
    """Per phrase an affect in [-1, 1] (the story curve at the phrase's start plus the telling's own
    variation) and a sentence: about one word per 1.5 syllables, of which round(3 * |affect|) are
    positive (affect > 0) or negative lexicon words."""
    affects, texts = [], []
    for (p0, p1), c in zip(phrases, curve_at_start, strict=True):
        a = float(np.clip(STORY_AFFECT_WEIGHT * c + rng.normal(0.0, PHRASE_AFFECT_SD), -1.0, 1.0))
        n_syl = sum(1 for syl in syllables if p0 <= syl["t0"] < p1)
        n = max(2, int(round(n_syl / 1.5)))
        sentence = [str(w) for w in rng.choice(NEUTRAL_WORDS, n)]
        pool = POSITIVE_WORDS if a > 0 else NEGATIVE_WORDS
        for _ in range(min(n - 1, int(round(3 * abs(a))))):
            sentence[int(rng.integers(1, n))] = str(rng.choice(pool))
        sentence[0] = sentence[0].capitalize()
        affects.append(round(a, 4))
        texts.append(" ".join(sentence) + ".")
    return affects, texts


def _backchannel_words(phrases, affects, backchannels) -> list[str]:
    """The listener's word for each backchannel, from the affect of the phrase just before it."""
    out = []
    for b0, _ in backchannels:
        before = [a for (p0, p1), a in zip(phrases, affects, strict=True) if p1 <= b0 + 1e-6]
        a = before[-1] if before else 0.0
        kind = "positive" if a > BACKCHANNEL_AFFECT else "negative" if a < -BACKCHANNEL_AFFECT else "neutral"
        out.append(BACKCHANNEL_WORDS[kind])
    return out


def _held_affect(t: np.ndarray, phrases, affects) -> np.ndarray:
    """Per frame, the affect of the latest phrase that has started (0 before the first)."""
    starts = np.array([p0 for p0, _ in phrases], dtype=np.float64)
    idx = np.searchsorted(starts, t, side="right") - 1
    values = np.append(np.asarray(affects, dtype=np.float64), 0.0)
    return np.where(idx >= 0, values[idx], 0.0)


def plan_session(
    listener: int,
    story: int,
    *,
    duration_s: float = 40.0,
    fps: float = 25.0,
    seed: int = 0,
    motion_limit: tuple[int, int] = (8, 8),
) -> SessionPlan:
    """All latent signals of session (``listener``, ``story``), regenerated from ``seed``.

    ``duration_s`` is the session length in seconds (``round(duration_s * fps)`` frames);
    ``motion_limit`` bounds the head translation in pixels (x, y).
    """
    if int(story) not in STORY_SPEAKER:
        raise ValueError(f"demo: story {story} has no speaker; use stories {sorted(STORY_SPEAKER)}")
    speaker = STORY_SPEAKER[int(story)]
    lp, sp = listener_params(listener, seed), speaker_params(speaker, seed)
    rng = _rng(seed, 3, listener, story)
    n = int(round(duration_s * fps))
    t = np.arange(n) / fps
    sr = AUDIO_RATE
    n_samples = int(round(n / fps * sr))

    # --- speech and backchannels ---
    phrases, syllables, backchannels = _speech_schedule(rng, n / fps)
    speech = _synth_speech(syllables, phrases, sp, rng, n_samples, sr)
    bc_audio = np.zeros(n_samples)
    for b0, _ in backchannels:
        bc_audio += _synth_backchannel(b0, lp, n_samples, sr)
    room = 0.0015 * rng.standard_normal(n_samples)
    audio = np.clip(speech + bc_audio + room, -1, 1).astype(np.float32)

    hop = sr / fps
    starts = (np.arange(n) * hop).astype(np.int64)
    seg = np.minimum(np.diff(np.append(starts, n_samples)), int(hop))
    energy = np.add.reduceat(speech**2, starts) / np.maximum(seg, 1)
    rms = np.sqrt(energy)
    envelope = rms / rms.max() if rms.max() > 0 else rms

    # --- the latent smile ---
    events = []
    t_event = -LABEL_DELAY_S - 6.0 + float(rng.exponential(1 / lp.smile_event_rate_hz))
    while t_event < n / fps:
        events.append({
            "onset_s": round(t_event, 3),
            "amplitude": round(float(rng.uniform(0.25, 0.5) * lp.smile_event_size), 4),
            "rise_s": round(float(rng.uniform(0.6, 1.2)), 3),
            "hold_s": round(float(rng.uniform(0.8, 3.0)), 3),
            "decay_s": round(float(rng.uniform(1.2, 2.5)), 3),
        })
        t_event += float(rng.exponential(1 / lp.smile_event_rate_hz)) + 1.0
    grid_fps = 10.0  # the slow smile noise lives on a 10 Hz grid from -delay - 1 s
    g0 = -LABEL_DELAY_S - 1.0
    grid = g0 + np.arange(int((n / fps - g0) * grid_fps) + 2) / grid_fps
    slow = 0.04 * _smooth_noise(rng, len(grid), 1.5 * grid_fps)

    def smile_at(times: np.ndarray) -> np.ndarray:
        felt = lp.story_sign * STORY_SMILE_WEIGHT * story_curve(story, times, seed)  # the story, as this listener feels it
        return np.clip(lp.smile_baseline + felt + _smile_curve(times, events) + np.interp(times, grid, slow), 0.0, 1.0)

    smile = smile_at(t)
    smile_delayed = smile_at(t - LABEL_DELAY_S)

    # --- the label ---
    win = max(1, int(round(SPEAKER_TERM_WINDOW_S * fps)))
    csum = np.cumsum(np.insert(envelope, 0, 0.0))
    lo = np.maximum(np.arange(1, n + 1) - win, 0)
    causal_mean = (csum[1:] - csum[lo]) / (np.arange(1, n + 1) - lo)
    sd = causal_mean.std()
    speaker_term = SPEAKER_TERM_WEIGHT * ((causal_mean - causal_mean.mean()) / sd if sd > 0 else 0 * causal_mean)
    noise = LABEL_SLOW_NOISE_SD * _smooth_noise(rng, n, 1.0 * fps) + LABEL_WHITE_NOISE_SD * rng.standard_normal(n)
    # words: their own random stream, so adding them left every other signal as it was
    text_rng = _rng(seed, 4, listener, story)
    phrase_affect, phrase_words = _phrase_words(text_rng, phrases, syllables, story_curve(story, np.array([p0 for p0, _ in phrases]), seed))
    backchannel_words = _backchannel_words(phrases, phrase_affect, backchannels)
    affect = _held_affect(t, phrases, phrase_affect)
    text_term = lp.story_sign * TEXT_TERM_WEIGHT * _causal_smooth(affect, TEXT_TERM_TAU_S, fps)
    valence = np.clip(lp.valence_offset + lp.valence_gain * smile_delayed + speaker_term + text_term + noise, -1.0, 1.0)

    # observers: a third person rating the listener, another rating the speaker
    obs_rng = _rng(seed, 5, listener, story)
    win = max(1, int(round(OBSERVER_LISTENER_SMOOTH_S * fps)))
    padded = np.concatenate([np.full(win // 2, valence[0]), valence, np.full(win - 1 - win // 2, valence[-1])])
    seen = _delayed(np.convolve(padded, np.ones(win) / win, mode="valid"), OBSERVER_LISTENER_DELAY_S, fps)
    slow_sd, white_sd = OBSERVER_LISTENER_NOISE_SD
    observer_listener = np.clip(
        lp.observer_offset + lp.observer_scale * seen
        + slow_sd * _smooth_noise(obs_rng, n, 1.0 * fps) + white_sd * obs_rng.standard_normal(n), -1.0, 1.0)
    told = _delayed(_causal_smooth(affect, OBSERVER_SPEAKER_TAU_S, fps), OBSERVER_SPEAKER_DELAY_S, fps)
    slow_sd, white_sd = OBSERVER_SPEAKER_NOISE_SD
    observer_speaker = np.clip(
        0.05 + OBSERVER_SPEAKER_GAIN * told
        + slow_sd * _smooth_noise(obs_rng, n, 1.0 * fps) + white_sd * obs_rng.standard_normal(n), -1.0, 1.0)

    # --- faces ---
    blinks = {"speaker": _blink_onsets(rng, n / fps), "listener": _blink_onsets(rng, n / fps)}
    states: dict[str, dict[str, np.ndarray]] = {}
    for role in ("speaker", "listener"):
        blink = np.zeros(n, np.int64)
        for b in blinks[role]:
            i0 = int(round(b * fps))
            for k, level in enumerate(_BLINK_SEQUENCE):
                if i0 + k < n:
                    blink[i0 + k] = level
        states[role] = {"blink": blink}
    n_smile = len(SMILE_LEVELS) - 1
    states["listener"]["smile"] = np.rint(smile * n_smile).astype(np.int64)
    lmouth = np.zeros(n, np.int64)
    for b0, b1 in backchannels:
        lmouth[(t >= b0) & (t < b1)] = BACKCHANNEL_MOUTH_STATE
    states["listener"]["mouth"] = lmouth
    states["listener"]["brow"] = np.zeros(n, np.int64)
    # the speaker's face tells the story's curve: smile states 0-4 around the neutral state
    states["speaker"]["smile"] = np.clip(np.rint(SPEAKER_SMILE_STATE + SPEAKER_STORY_SMILE_STATES * story_curve(story, t, seed)),
                                         0, len(SMILE_LEVELS) - 1).astype(np.int64)
    states["speaker"]["mouth"] = np.digitize(envelope, [0.08, 0.35, 0.65]).astype(np.int64)
    brow = np.zeros(n, np.int64)
    for syl in syllables:
        if syl["accent"]:
            brow[(t >= syl["t0"] - 0.05) & (t < syl["t1"] + 0.15)] = 1
    states["speaker"]["brow"] = brow

    speaking = np.convolve(envelope > 0.08, np.ones(int(fps)) / fps, mode="same")
    spk_xy = _head_motion(rng, n, fps, (2.5, 1.5))
    spk_xy[:, 0] += 2.0 * speaking * _smooth_noise(rng, n, 0.25 * fps)
    lis_xy = _head_motion(rng, n, fps, (1.5, 1.5))
    for b0, b1 in backchannels:  # a nod
        u = (t - b0 + 0.1) / (b1 - b0 + 0.2)
        lis_xy[:, 1] += np.where((u > 0) & (u < 1), 4.0 * np.sin(np.pi * np.clip(u, 0, 1)), 0.0)
    offsets = {"speaker": _quantize_even(spk_xy, motion_limit), "listener": _quantize_even(lis_xy, motion_limit)}

    return SessionPlan(
        listener=int(listener), story=int(story), speaker=speaker, fps=float(fps), n_frames=n,
        phrases=phrases, syllables=syllables, backchannels=backchannels, smile_events=events,
        blinks=blinks, smile=smile, smile_delayed=smile_delayed, speech_envelope=envelope,
        speaker_term=speaker_term, valence=valence, states=states, offsets=offsets, audio=audio,
        phrase_affect=phrase_affect, phrase_words=phrase_words, backchannel_words=backchannel_words,
        affect=affect, text_term=text_term, observer_listener=observer_listener, observer_speaker=observer_speaker,
    )


# ----------------------------------------------------------------------------- writing


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)


def valence_csv(valence: np.ndarray) -> str:
    """The official annotation format: header ``valence``, one ``%.6f`` row per frame."""
    return "valence\n" + "\n".join(f"{v:.6f}" for v in np.asarray(valence, dtype=np.float64)) + "\n"


def transcript_cues(plan: SessionPlan) -> list[tuple[float, float, list[str]]]:
    """The session's transcript: (start_s, end_s, lines) per cue, sorted by start.

    One ``[S]`` cue per phrase and one ``[L]`` cue per backchannel at their synthesised
    times, except: the first backchannel and the phrase before it form one cue carrying both
    tags (as subtitle editors merge a quick exchange), and the longest other phrase is split
    into two ``[S]`` cues that overlap by 0.4 s.
    """
    cues: list[tuple[float, float, list[str]]] = []
    merged_phrase = merged_bc = -1
    if plan.backchannels:
        b0 = plan.backchannels[0][0]
        before = [i for i, (_, p1) in enumerate(plan.phrases) if p1 <= b0 + 1e-6]
        if before:
            merged_phrase, merged_bc = before[-1], 0
    others = [i for i in range(len(plan.phrases)) if i != merged_phrase and len(plan.phrase_words[i].split()) >= 4]
    split = max(others, key=lambda i: plan.phrases[i][1] - plan.phrases[i][0]) if others else -1
    for i, ((p0, p1), text) in enumerate(zip(plan.phrases, plan.phrase_words, strict=True)):
        if i == merged_phrase:
            b0, b1 = plan.backchannels[merged_bc]
            cues.append((p0, b1, [f"[S] {text}", f"[L] {plan.backchannel_words[merged_bc]}"]))
        elif i == split:
            words = text.split()
            half, mid = len(words) // 2, (p0 + p1) / 2
            cues.append((p0, mid + 0.2, ["[S] " + " ".join(words[:half])]))
            cues.append((mid - 0.2, p1, ["[S] " + " ".join(words[half:])]))
        else:
            cues.append((p0, p1, [f"[S] {text}"]))
    for j, ((b0, b1), word) in enumerate(zip(plan.backchannels, plan.backchannel_words, strict=True)):
        if j != merged_bc:
            cues.append((b0, b1, [f"[L] {word}"]))
    return sorted(cues, key=lambda c: c[0])


def _srt_time(t: float) -> str:
    ms = int(round(t * 1000))
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def transcript_srt(plan: SessionPlan) -> bytes:
    """The session's transcript as SubRip bytes: UTF-8 with a byte-order mark and CRLF line
    ends, as Windows subtitle editors write them."""
    blocks = [f"{i}\r\n{_srt_time(a)} --> {_srt_time(b)}\r\n" + "\r\n".join(lines)
              for i, (a, b, lines) in enumerate(transcript_cues(plan), start=1)]
    return ("\ufeff" + "\r\n\r\n".join(blocks) + "\r\n").encode("utf-8")


def _ccc(a: np.ndarray, b: np.ndarray) -> float:
    """Lin's concordance correlation coefficient (population variances), for the build's README."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    cov = np.mean((a - a.mean()) * (b - b.mean()))
    den = a.var() + b.var() + (a.mean() - b.mean()) ** 2
    return float(2 * cov / den) if den > 0 else 0.0


@dataclass(frozen=True)
class _Layout:
    width: int
    height: int
    split_x: int
    tile_h: int
    tile_w: int
    origin: dict  # role -> (x, y) of the tile's top-left at rest
    motion_limit: tuple[int, int]


def _layout(width: int, height: int, rig: FaceRig) -> _Layout:
    if width % 2 or height % 2:
        raise ValueError(f"demo: width and height must be even for yuv420p video, got {width}x{height}")
    regions = role_regions(width)
    split = regions["speaker"][1]
    th0, tw0 = rig.tile.shape[:2]
    scale = min(1.0, (height - 20) / th0, (split - 40) / tw0, (width - split - 40) / tw0)
    tile_h, tile_w = _even(th0 * scale), _even(tw0 * scale)
    if tile_h < 120:
        raise ValueError(
            f"demo: a {width}x{height} frame leaves a {tile_w}x{tile_h} px face tile, too small for "
            "face detection; use at least 640x180 (the default is 1280x360)"
        )
    origin = {}
    for role, (x0, x1) in regions.items():
        origin[role] = (_even(x0 + (x1 - x0 - tile_w) / 2), _even((height - tile_h) / 2))
    mx = min(8, (split - tile_w) // 2 - 2, (width - split - tile_w) // 2 - 2)
    my = min(8, (height - tile_h) // 2)
    limit = (max(0, mx - mx % 2), max(0, my - my % 2))
    return _Layout(width, height, split, tile_h, tile_w, origin, limit)


def _background_i420(layout: _Layout, colours: dict[str, np.ndarray]) -> np.ndarray:
    import cv2

    rgb = np.empty((layout.height, layout.width, 3), np.uint8)
    rgb[:, : layout.split_x] = colours["speaker"]
    rgb[:, layout.split_x :] = colours["listener"]
    # soft vertical shading, like a lit room
    shade = 0.92 + 0.08 * np.sin(np.linspace(0, np.pi, layout.height))[:, None, None]
    rgb = np.clip(rgb * shade, 0, 255).astype(np.uint8)
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420)


def _frames(plan: SessionPlan, layout: _Layout, caches: dict[str, _TileCache]) -> Iterator[np.ndarray]:
    """The session's frames as packed yuv420p arrays ((H * 3 / 2, W) uint8; one buffer reused)."""
    h, w = layout.height, layout.width
    bg = _background_i420(layout, {r: c.bg for r, c in caches.items()})
    buf = bg.copy()
    y_plane = buf[:h]
    u_plane = buf[h : h + h // 4].reshape(h // 2, w // 2)
    v_plane = buf[h + h // 4 :].reshape(h // 2, w // 2)
    th, tw = layout.tile_h, layout.tile_w
    st = {role: np.stack([plan.states[role][k] for k in ("smile", "mouth", "blink", "brow")], axis=1) for role in caches}
    for i in range(plan.n_frames):
        np.copyto(buf, bg)
        for role, cache in caches.items():
            ty, tu, tv = cache.get(tuple(int(v) for v in st[role][i]))
            x = layout.origin[role][0] + int(plan.offsets[role][i, 0])
            y = layout.origin[role][1] + int(plan.offsets[role][i, 1])
            y_plane[y : y + th, x : x + tw] = ty
            u_plane[y // 2 : (y + th) // 2, x // 2 : (x + tw) // 2] = tu
            v_plane[y // 2 : (y + th) // 2, x // 2 : (x + tw) // 2] = tv
        yield buf


def _write_video(path: Path, frames: Iterator[np.ndarray], layout: _Layout, fps: float, audio: np.ndarray, sr: int) -> None:
    """H.264 (libx264, single-threaded: deterministic) + AAC mono MP4, written atomically."""
    import av

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    rate = Fraction(fps).limit_denominator(1001)
    chunk = 1024
    try:
        with av.open(str(tmp), "w", format="mp4") as c:
            vs = c.add_stream("libx264", rate=rate)
            vs.width, vs.height, vs.pix_fmt = layout.width, layout.height, "yuv420p"
            # veryfast with the cheapest motion search and no B-frames: ~1.6x faster than
            # plain veryfast for ~20% more bytes (the build time is mostly x264)
            vs.options = {
                "preset": "veryfast", "crf": "20",
                "x264-params": "me=dia:subme=1:partitions=none:trellis=0:weightp=0:8x8dct=0:bframes=0",
            }
            vs.codec_context.thread_count = 1
            aus = c.add_stream("aac", rate=sr)
            aus.layout = "mono"
            aus.bit_rate = 96000
            aus.options = {"aac_coder": "fast"}
            a_pos = 0
            for i, yuv in enumerate(frames):
                frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
                frame.pts = i
                frame.time_base = 1 / rate
                for pkt in vs.encode(frame):
                    c.mux(pkt)
                a_end = min(len(audio), int(round((i + 1) / fps * sr)))
                while a_pos + chunk <= a_end or (a_pos < a_end == len(audio)):
                    piece = audio[a_pos : a_pos + chunk][None, :]
                    af = av.AudioFrame.from_ndarray(np.ascontiguousarray(piece), format="flt", layout="mono")
                    af.sample_rate = sr
                    af.pts = a_pos
                    af.time_base = Fraction(1, sr)
                    for pkt in aus.encode(af):
                        c.mux(pkt)
                    a_pos += piece.shape[1]
            for pkt in vs.encode():
                c.mux(pkt)
            for pkt in aus.encode():
                c.mux(pkt)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


# ----------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class DemoInfo:
    """What :func:`build_demo` wrote."""

    out_dir: Path
    sessions: tuple[str, ...]
    n_frames: dict[str, int]
    seed: int
    duration_s: float
    width: int
    height: int
    fps: float
    build_seconds: float

    @property
    def videos(self) -> list[Path]:
        return [self.out_dir / "Videos" / f"{s}.mp4" for s in self.sessions]

    @property
    def annotations(self) -> list[Path]:
        return [self.out_dir / "Annotations" / f"{s}.csv" for s in self.sessions]

    @property
    def transcripts(self) -> list[Path]:
        return [self.out_dir / "Transcripts" / f"{s.lower().replace('subject', 'transcribed_subject')}.srt" for s in self.sessions]

    @property
    def observer_annotations(self) -> dict[str, list[Path]]:
        """Target -> the observer rating files, per session."""
        return {
            "valence_observer_listener": [self.out_dir / "Observer_Listener" / f"{s}.csv" for s in self.sessions],
            "valence_observer_speaker": [self.out_dir / "Observer_Speaker" / f"{s}.csv" for s in self.sessions],
        }

    def __str__(self) -> str:
        return (
            f"{len(self.sessions)} session{'s' if len(self.sessions) != 1 else ''} of {self.duration_s:g} s, {self.width}x{self.height} at "
            f"{self.fps:g} fps, seed {self.seed}, built in {self.build_seconds:.1f} s"
        )


def _truth(seed, listeners, speakers, plans, layout, fps, duration_s) -> dict:
    return {
        "generator": "featurestore.demo",
        "generator_version": GENERATOR_VERSION,
        "seed": int(seed),
        "fps": float(fps),
        "duration_s": float(duration_s),
        "width": layout.width,
        "height": layout.height,
        "split_x": layout.split_x,
        "audio_rate_hz": AUDIO_RATE,
        "face": {
            "photo": "skimage.data.astronaut() (public domain, NASA)",
            "photo_rows": list(_PHOTO_ROWS), "photo_cols": list(_PHOTO_COLS), "scale": _PHOTO_SCALE,
            "tile_size": [layout.tile_w, layout.tile_h],
            "tile_origin": {r: list(v) for r, v in layout.origin.items()},
            "smile_levels": list(SMILE_LEVELS), "mouth_levels": list(MOUTH_LEVELS),
            "blink_levels": list(BLINK_LEVELS), "brow_levels": list(BROW_LEVELS),
            "listener_smile_state": "round(smile * 6)", "speaker_smile_state": SPEAKER_SMILE_STATE,
            "speaker_mouth_state": "digitize(speech_envelope, [0.08, 0.35, 0.65])",
            "backchannel_mouth_state": BACKCHANNEL_MOUTH_STATE,
        },
        "label": {
            "target": "valence_self",
            "formula": "clip(valence_offset + valence_gain * smile(t - delay_s) + speaker_term(t) + text_term(t) + noise(t), -1, 1)",
            "delay_s": LABEL_DELAY_S,
            "speaker_term": f"{SPEAKER_TERM_WEIGHT} * zscore(mean of the speaker's frame RMS envelope over the last {SPEAKER_TERM_WINDOW_S:g} s)",
            "speaker_term_weight": SPEAKER_TERM_WEIGHT,
            "speaker_term_window_s": SPEAKER_TERM_WINDOW_S,
            "slow_noise_sd": LABEL_SLOW_NOISE_SD, "white_noise_sd": LABEL_WHITE_NOISE_SD,
            "smile": "clip(smile_baseline + sum of smile_events + 0.04 * slow noise, 0, 1)",
            "text_term": f"{TEXT_TERM_WEIGHT} * causal_smooth(affect(t), tau {TEXT_TERM_TAU_S:g} s)",
            "affect": "affect of the latest phrase the speaker has started, held until the next one (0 before the first)",
        },
        "words": {
            "phrase_affect": "a_p = clip(0.6 * arc_(p-1) + N(0, 0.5), -1, 1) per phrase (a drifting story arc)",
            "phrase_words": "about one word per 1.5 syllables; round(3 * |a_p|) of them positive (a_p > 0) or negative lexicon words",
            "positive_words": list(POSITIVE_WORDS), "negative_words": list(NEGATIVE_WORDS),
            "neutral_words": list(NEUTRAL_WORDS),
            "backchannel_words": {**BACKCHANNEL_WORDS, "threshold": BACKCHANNEL_AFFECT},
        },
        "observers": {
            "valence_observer_listener": (
                f"clip(observer_offset + observer_scale * moving_average(valence_self, {OBSERVER_LISTENER_SMOOTH_S:g} s)"
                f"(t - {OBSERVER_LISTENER_DELAY_S:g} s) + noise (slow sd {OBSERVER_LISTENER_NOISE_SD[0]}, white sd "
                f"{OBSERVER_LISTENER_NOISE_SD[1]}), -1, 1)"
            ),
            "valence_observer_speaker": (
                f"clip(0.05 + {OBSERVER_SPEAKER_GAIN} * causal_smooth(affect, tau {OBSERVER_SPEAKER_TAU_S:g} s)"
                f"(t - {OBSERVER_SPEAKER_DELAY_S:g} s) + noise (slow sd {OBSERVER_SPEAKER_NOISE_SD[0]}, white sd "
                f"{OBSERVER_SPEAKER_NOISE_SD[1]}), -1, 1)"
            ),
        },
        "listeners": {str(k): vars(v) for k, v in listeners.items()},
        "speakers": {str(k): vars(v) for k, v in speakers.items()},
        "sessions": {
            session_name(p.listener, p.story): {
                "listener": p.listener, "story": p.story, "speaker": p.speaker, "n_frames": p.n_frames,
                "speech_phrases_s": [list(x) for x in p.phrases],
                "backchannels_s": [list(x) for x in p.backchannels],
                "smile_events": p.smile_events,
                "blink_onsets_s": p.blinks,
                "valence_mean": round(float(p.valence.mean()), 4),
                "valence_sd": round(float(p.valence.std()), 4),
                "phrase_affect": p.phrase_affect,
                "backchannel_words": p.backchannel_words,
                "ccc_self_vs_observer_listener": round(_ccc(p.valence, p.observer_listener), 4),
                "ccc_self_vs_observer_speaker": round(_ccc(p.valence, p.observer_speaker), 4),
            }
            for p in plans
        },
    }


def _readme(truth: dict, info_line: str) -> str:
    lab = truth["label"]
    rows = "\n".join(
        f"| {k} | {v['valence_offset']:+.3f} | {v['valence_gain']:.3f} | {v['smile_baseline']:.3f} | "
        f"{v['smile_event_rate_hz']:.3f} | {v['smile_event_size']:.3f} | {v['backchannel_f0_hz']:.0f} |"
        for k, v in truth["listeners"].items()
    )
    spk = "\n".join(f"| {k} | {v['f0_hz']:.0f} | {v['formant_scale']:.3f} |" for k, v in truth["speakers"].items())
    words, obs = truth["words"], truth["observers"]
    sessions = truth["sessions"]
    agree = "\n".join(
        f"| {k} | {v['ccc_self_vs_observer_listener']:.3f} | {v['ccc_self_vs_observer_speaker']:.3f} |" for k, v in sessions.items()
    )
    agree_l = float(np.mean([v["ccc_self_vs_observer_listener"] for v in sessions.values()]))
    agree_s = float(np.mean([v["ccc_self_vs_observer_speaker"] for v in sessions.values()]))
    return f"""# Demo corpus (generated by `featurestore demo`)

{info_line}. Built offline and deterministically from seed {truth['seed']} by
`featurestore.demo.build_demo` (generator version {truth['generator_version']}); rebuild it
rather than edit it. Layout as in OMG-Empathy:

- `Videos/Subject_<L>_Story_<S>.mp4`: {truth['width']}x{truth['height']}, {truth['fps']:g} fps H.264,
  AAC mono {truth['audio_rate_hz']} Hz; speaker left of x={truth['split_x']}, listener right of it.
- `Annotations/Subject_<L>_Story_<S>.csv`: header `valence`, one row per video frame, [-1, 1]
  (the listener's self-rating, target `valence_self`).
- `Transcripts/transcribed_subject_<L>_story_<S>.srt`: cues tagged `[S]` (speaker) and `[L]`
  (listener) at the synthesised speech and backchannel times (UTF-8 with BOM, CRLF).
- `Observer_Listener/` and `Observer_Speaker/Subject_<L>_Story_<S>.csv`: observer ratings in
  the same format (targets `valence_observer_listener`, `valence_observer_speaker`).
- `demo_truth.json`: the seed and the parameters of every latent signal;
  `featurestore.demo.plan_session(L, S, duration_s=..., seed=...)` regenerates the per-frame signals.

## What is planted

Faces: one real face (the public-domain NASA astronaut portrait shipped with scikit-image),
the speaker mirrored and colour-shifted, each listener tinted. Expressions are rendered by
piecewise-affine warps around the 68 dlib landmarks: 7 smile levels, 4 mouth openings,
3 blink levels, a brow raise; heads move a few pixels.

Voices: the speaker talks in phrases of synthetic voiced syllables (glottal source, F0
about 125 Hz for odd speakers and 175 Hz for even ones, intonation, five vowels) separated by
pauses; the speaker's mouth opens with the speech loudness and the brows rise on pitch
accents. The listener answers with short "mm-hm" backchannels (F0 200-240 Hz) in some pauses,
opening the mouth and nodding. Backchannels carry no label information.

Label:

    valence(t) = valence_offset + valence_gain * smile(t - {lab['delay_s']:g} s) + speaker_term(t) + text_term(t) + noise(t)

clipped to [-1, 1], where `smile(t)` in [0, 1] is the listener's latent smile, which their
face shows at time t (so it reaches the valence {lab['delay_s']:g} s later),
`speaker_term` = {lab['speaker_term']} (weak),
`text_term` = {lab['text_term']}, with `affect(t)` the affect of the
speaker's latest phrase (below), and the noise is slow (sd {lab['slow_noise_sd']})
plus white (sd {lab['white_noise_sd']}). Listener features (mouth width, smile) with a label
delay of about {lab['delay_s']:g} s should predict the valence well; speaker face and voice only
weakly; the speaker's words (the `lexicon` channel) add what neither face nor voice shows.

Words: each phrase has an affect a_p in [-1, 1] ({words['phrase_affect']}); its sentence has
{words['phrase_words']}. Positive words: {', '.join(words['positive_words'])}. Negative words:
{', '.join(words['negative_words'])}. The listener says "{words['backchannel_words']['positive']}" after a
phrase with a_p > {words['backchannel_words']['threshold']}, "{words['backchannel_words']['negative']}" after
one below -{words['backchannel_words']['threshold']}, else "{words['backchannel_words']['neutral']}". In each
transcript the first backchannel shares one cue with the phrase before it (both tags) and
the longest other phrase is split into two overlapping `[S]` cues.

Observers: `valence_observer_listener` = {obs['valence_observer_listener']};
`valence_observer_speaker` = {obs['valence_observer_speaker']}.
Planted agreement with the self-rating (CCC per session, this build):

| session | self vs observer of listener | self vs observer of speaker |
|---|---|---|
{agree}
| mean | {agree_l:.3f} | {agree_s:.3f} |

| listener | valence_offset | valence_gain | smile_baseline | smile events / s | event size | backchannel F0 (Hz) |
|---|---|---|---|---|---|---|
{rows}

| speaker | F0 (Hz) | formant scale |
|---|---|---|
{spk}

## Use

Treat the folder like a copy of OMG-Empathy: `featurestore scan <folder>` then
`featurestore extract <folder>` (what `make features` does with the demo corpus): it reads
the transcripts (channels `speech`, `lexicon`; who talks for the per-role voice channels)
and the observer ratings (label targets) too. `experiments agreement` compares the ratings.
Official split by story: train 2, 4, 5, 8; validation 1; test 3, 6, 7.

Sources: the face photo is `skimage.data.astronaut()` (Eileen Collins, NASA, public domain);
all audio is synthetic.
"""


_FEATURESTORE_YAML = """\
# featurestore settings for the demo corpus (read by `featurestore scan/extract DATA_DIR`)
face_fps: 5.0
extractors:
  egemaps: {sampling_rate: 16000}
"""


def build_demo(
    out_dir: str | os.PathLike,
    *,
    n_listeners: int = 6,
    stories: Sequence[int] = (1, 2, 3, 4, 5, 6),
    duration_s: float = 24.0,
    width: int = 1280,
    height: int = 360,
    fps: float = 25,
    seed: int = 0,
    progress: bool = True,
) -> DemoInfo:
    """Write the demo corpus (``n_listeners`` x ``stories`` sessions of ``duration_s`` seconds).

    Frames are ``width`` x ``height`` pixels at ``fps`` frames per second; audio is 44.1 kHz
    mono. Same ``seed``, same files (see the module docstring). ``progress`` shows a tqdm
    bar over sessions. Existing files of the same sessions are overwritten.

    >>> info = build_demo(tmp, n_listeners=2, stories=(1, 2), duration_s=6)  # doctest: +SKIP
    """
    from tqdm import tqdm

    t_start = time.perf_counter()
    if int(n_listeners) < 1:
        raise ValueError(f"demo: n_listeners must be >= 1, got {n_listeners}")
    stories = tuple(int(s) for s in stories)
    if not stories:
        raise ValueError("demo: give at least one story")
    bad = [s for s in stories if s not in STORY_SPEAKER]
    if bad:
        raise ValueError(f"demo: stories {bad} have no speaker; OMG-Empathy stories are {sorted(STORY_SPEAKER)}")
    if not duration_s >= 2.0:
        raise ValueError(f"demo: duration_s must be at least 2 seconds, got {duration_s}")
    if not fps > 0:
        raise ValueError(f"demo: fps must be positive, got {fps}")

    rig = face_rig()
    layout = _layout(int(width), int(height), rig)
    out = Path(out_dir)
    for folder in ("Videos", "Annotations", "Transcripts", "Observer_Listener", "Observer_Speaker"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    listeners = {L: listener_params(L, seed) for L in range(1, int(n_listeners) + 1)}
    speakers = {S: speaker_params(S, seed) for S in sorted({STORY_SPEAKER[s] for s in stories})}
    size = (layout.tile_h, layout.tile_w)
    speaker_caches = {S: _TileCache(rig, Look(True, p.tint), size) for S, p in speakers.items()}

    plans: list[SessionPlan] = []
    pairs = [(L, S) for L in listeners for S in stories]
    bar = tqdm(pairs, desc="demo corpus", unit="session", disable=not progress)
    for L, S in bar:
        sid = session_name(L, S)
        bar.set_postfix_str(sid)
        plan = plan_session(L, S, duration_s=duration_s, fps=fps, seed=seed, motion_limit=layout.motion_limit)
        caches = {"speaker": speaker_caches[plan.speaker], "listener": _TileCache(rig, Look(False, listeners[L].tint), size)}
        _write_video(out / "Videos" / f"{sid}.mp4", _frames(plan, layout, caches), layout, fps, plan.audio, plan.audio_rate)
        _atomic_write_bytes(out / "Annotations" / f"{sid}.csv", valence_csv(plan.valence).encode())
        _atomic_write_bytes(out / "Transcripts" / f"transcribed_subject_{L}_story_{S}.srt", transcript_srt(plan))
        _atomic_write_bytes(out / "Observer_Listener" / f"{sid}.csv", valence_csv(plan.observer_listener).encode())
        _atomic_write_bytes(out / "Observer_Speaker" / f"{sid}.csv", valence_csv(plan.observer_speaker).encode())
        plan.audio = np.zeros(0, np.float32)  # free the samples; the rest is small
        plans.append(plan)

    truth = _truth(seed, listeners, speakers, plans, layout, fps, duration_s)
    info = DemoInfo(
        out_dir=out, sessions=tuple(session_name(L, S) for L, S in pairs),
        n_frames={session_name(p.listener, p.story): p.n_frames for p in plans},
        seed=int(seed), duration_s=float(duration_s), width=layout.width, height=layout.height,
        fps=float(fps), build_seconds=time.perf_counter() - t_start,
    )
    line = (
        f"{len(pairs)} sessions ({len(listeners)} listener{'s' if len(listeners) > 1 else ''} x "
        f"stor{'ies' if len(stories) > 1 else 'y'} {', '.join(map(str, stories))}), {duration_s:g} s each"
    )
    _atomic_write_bytes(out / "demo_truth.json", (json.dumps(truth, indent=1) + "\n").encode())
    _atomic_write_bytes(out / "README.md", _readme(truth, line).encode())
    _atomic_write_bytes(out / "featurestore.yaml", _FEATURESTORE_YAML.encode())
    return info
