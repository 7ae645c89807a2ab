"""A full-size synthetic feature store, written without any media, with planted structure.

OMG-Empathy is licence-gated; the demo corpus (:mod:`featurestore.demo`) is small. This
module writes a store of the *real* corpus' size and shape straight into HDF5 shards, so
benchmarks, scaling studies and model checks run at full size in seconds. Nothing is
decoded or extracted: every channel is drawn from a few latent signals, and the labels
depend on them in a known way, so a pipeline can be checked for *quality* too (it should
find the listener, the delay and the per-listener scaling).

**Sessions.** ``n_sessions`` sessions, 8 stories per listener: session ``i`` is listener
``i // 8 + 1``, story ``i % 8 + 1`` (``Subject_<L>_Story_<S>``); the default 80 are the real
10 listeners x 8 stories, 160 are 20 listeners. The speaker comes from
:data:`featurestore.sources.manifest.STORY_SPEAKER`, the split from :data:`~featurestore.sources.manifest.SPLITS`.

**Lengths** (:func:`session_lengths`). Frames at 25 fps, multiples of 25, between 4,700 and
11,925. Each length is ``4700 + 7225 * Beta(2.5, b)``, ``b`` chosen so the mean is the real
corpus mean (633,850 / 80 = 7,923 frames). For the default 80 sessions the draws are then
made to sum to exactly 633,850 frames, the real total: the excess over 4,700 frames is
rescaled by one common factor (sessions that would pass 11,925 are clipped there and the
others rescaled again), and the lengths are rounded to multiples of 25 by the largest-
remainder method (round all down, then add 25 frames to the few sessions with the largest
remainders until the sum matches), which never leaves the range. Other sizes keep the same
distribution without an exact total.

**Channels** (real widths, rates and column names):

==================================  =====  ===========  ==============================================
channel                             cols   rate         columns
==================================  =====  ===========  ==============================================
``speaker|listener/face_geom``      17     face_fps     :data:`featurestore.extractors.face_geom.COLUMNS`
``speaker|listener/face_au``        20     face_fps     :data:`AU_COLUMNS` (py-feat Detectorv1, xgb)
``scene/egemaps``                   25     100 Hz       openSMILE eGeMAPSv02 LLD names
``speaker|listener/egemaps``        25     100 Hz       the scene rows (HDF5 hard links, stored once);
                                                        ``valid`` = that role talks
==================================  =====  ===========  ==============================================

Face samples sit at the video frames :func:`featurestore.sources.media.iter_frames` would sample at
``face_fps`` (time = frame / 25 s); eGeMAPS rows at ``k * 0.01`` s, ``4 * n_frames - 4`` of them
(what openSMILE returns for the session's audio). About 3 % of each role's face samples are
invalid (no face: NaN, ``valid`` False) in bursts of about a second. The speaker talks in
phrases of 1.2-3.5 s with 0.35-1.5 s pauses (about 70 % of the time), the listener
backchannels now and then (about 5 %); per-role eGeMAPS ``valid`` marks voiced frames of
that role's talk, as :mod:`featurestore.sources.speaking` does. Unvoiced frames hold 0 in the
voice-quality ``*_sma3nz`` columns and -201 in the formant amplitudes, as openSMILE writes.

**Latent signals** (100 Hz, Gaussian noise low-pass filtered with a 2nd-order Butterworth
magnitude response, unit variance):

- ``affect(t)`` (0.05 Hz): the listener's feeling. It drives the listener's face:
  ``lip_corner_pull`` (+0.045 IOD per unit), ``lip_corner_raise`` (+0.03), ``eye_open_*``
  (-0.012), ``brow_gap`` (+0.008), AU12 and AU06 (logit +1.5, +1.2), AU04 and AU15 (-0.8,
  -0.7) ..., scaled by a per-listener expressivity in [0.7, 1.3], plus noise.
- ``voice(t)`` (0.1 Hz): the speaker's vocal intensity. It drives the speaker's eGeMAPS
  ``Loudness_sma3`` (+0.25 per unit) and ``F0semitoneFrom27.5Hz_sma3nz`` (+1.5 semitones)
  on voiced speaker frames, and the speaker's brows (``brow_raise_*``, AU01, AU02).
- other latents carry no label information: the speaker's own expression, head motion,
  mouth movement while talking, blinks, the listener's brows.

**Labels** ``valence_self`` (25 fps), for listener ``L``, with ``d = 1.5`` s::

    valence(t) = offset_L + gain_L * affect(t - d) + 0.08 * voice(t - d)
                 + 0.05 * drift(t) + 0.01 * jitter(t),          clipped to [-1, 1]

with ``gain_L`` in [0.2, 0.45] and ``offset_L`` in [-0.3, 0.3] per listener, ``drift`` a
0.01 Hz and ``jitter`` a 1 Hz unit latent. So the listener's face at ``t`` shows in the
valence 1.5 s later (a model needs a label delay), listener features predict valence well
(correlation about 0.9 within a session for a windowed ``lip_corner_pull``), speaker
features weakly (about 0.2 at best), and per-listener calibration pays. The numbers of a
build are written to ``<store>/synth_truth.json``.

**Determinism.** Everything random comes from ``numpy.random.SeedSequence`` keyed by the
seed and the listener, speaker or session, so a session's data depend only on the seed,
its listener and story, and its length (for the default 80 sessions the lengths are drawn
jointly to meet the total). Same seed, same arrays.

**Cost.** One session at a time is generated and written (a few MB in memory); the 80-session
store (about 310 MB: the per-role eGeMAPS channels link the scene's rows, see
:class:`featurestore.storage.store.Channel`) takes about 10 s on one core.

**Modules.** :mod:`~bench.synth.lengths` (session lengths),
:mod:`~bench.synth.model` (latents, planted parameters),
:mod:`~bench.synth.session` (one session's channels and labels),
:mod:`~bench.synth.build` (the store). The names below are importable from
``bench.synth``.
"""

from .build import SynthInfo, synth_store
from .lengths import (
    CORPUS_SESSIONS,
    CORPUS_TOTAL_FRAMES,
    LENGTH_RANGE,
    LENGTH_STEP,
    session_lengths,
    session_plan,
)
from .model import (
    LABEL_DELAY_S,
    SPEAKER_WEIGHT,
    SYNTH_EXTRACTOR,
    SYNTH_TRUTH,
    SYNTH_VERSION,
    ListenerTruth,
    SpeakerTruth,
    listener_truth,
    speaker_truth,
)
from .session import (
    AU_COLUMNS,
    CHANNEL_KEYS,
    SynthSession,
    egemaps_columns,
    face_sample_frames,
    synth_session,
)

__all__ = [
    "AU_COLUMNS",
    "CHANNEL_KEYS",
    "CORPUS_SESSIONS",
    "CORPUS_TOTAL_FRAMES",
    "LABEL_DELAY_S",
    "LENGTH_RANGE",
    "LENGTH_STEP",
    "SPEAKER_WEIGHT",
    "SYNTH_EXTRACTOR",
    "SYNTH_TRUTH",
    "SYNTH_VERSION",
    "ListenerTruth",
    "SpeakerTruth",
    "SynthInfo",
    "SynthSession",
    "egemaps_columns",
    "face_sample_frames",
    "listener_truth",
    "session_lengths",
    "session_plan",
    "speaker_truth",
    "synth_session",
    "synth_store",
]
