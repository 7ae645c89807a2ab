"""eGeMAPS through the store path vs. calling openSMILE directly on the same 16 kHz audio.

The audio of a 2560x720 demo-corpus video (synthesised speech and backchannels, 44.1 kHz
AAC) is decoded once to 16 kHz mono (what ``featurestore extract`` does, timed separately as
``egemaps.audio_decode``). Then, best of 3 each (calls interleaved), on the same samples:

* the store path: :class:`featurestore.extractors.egemaps.EgemapsExtractor` ``process_signal``
  (openSMILE plus the conversion to a :class:`~featurestore.features.Features` table), the
  channel's provenance, and the atomic write of ``scene/egemaps`` into a shard: what
  ``featurestore extract --channels egemaps`` does per session after decoding, minus the fixed
  cost of building the openSMILE object (done once, before timing, on both sides);
* the baseline: ``opensmile.Smile(eGeMAPSv02, LowLevelDescriptors).process_signal``.

The stored rows are checked equal to openSMILE's. Throughput is audio seconds processed per
second. Goal (issue 5): store throughput >= 0.9 of openSMILE's.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from featurestore.extractors.egemaps import EgemapsExtractor
from featurestore.sources import media
from featurestore.storage.store import Channel, SessionMeta, Store, cache_key, utc_now

from . import inputs
from .harness import best_times, record

RATE = 16000
FULL = {"duration_s": 60.0}
QUICK = {"duration_s": 6.0}


def store_path(ex: EgemapsExtractor, signal: np.ndarray, store: Store, meta: SessionMeta) -> Path:
    """Extract and store ``scene/egemaps`` of one signal, as ``featurestore extract`` does."""
    feats = ex.process_signal(signal, RATE)["scene"]
    params = ex.params()
    source = {"path": "bench", "size": int(signal.size), "fingerprint": "bench"}
    ch = Channel.from_features(
        feats,
        extractor=ex.name,
        extractor_version=ex.version,
        params=params,
        cache_key=cache_key(source, ex.name, ex.version, params),
        source=source,
        created_utc=utc_now(),
    )
    store.shard_path(meta.session).unlink(missing_ok=True)
    return store.write_session(meta, {"scene/egemaps": ch})


def run(work: Path, quick: bool = False) -> list[dict]:
    """Time both paths on the same audio; returns the records."""
    import opensmile

    size = QUICK if quick else FULL
    video = inputs.demo_video(work, size["duration_s"])
    t0 = time.perf_counter()
    signal = media.read_audio(video, RATE)
    decode_s = time.perf_counter() - t0
    audio_s = signal.size / RATE

    smile = opensmile.Smile(
        feature_set=opensmile.FeatureSet.eGeMAPSv02,
        feature_level=opensmile.FeatureLevel.LowLevelDescriptors,
    )
    ex = EgemapsExtractor()
    smile.process_signal(signal[:RATE], RATE)  # warm both up (fixed cost, not timed)
    ex.process_signal(signal[:RATE], RATE)
    meta = SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", n_frames=int(round(audio_s * 25)))
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        store = Store(tmp, mode="a")
        times = best_times(
            {
                "raw": lambda: smile.process_signal(signal, RATE),
                "store": lambda: store_path(ex, signal, store, meta),
            },
            repeat=3,
        )
        (t_raw, df), (t_store, _) = times["raw"], times["store"]
        stored = store.read_channel(meta.session, "scene/egemaps")
    if not np.array_equal(stored.data, df.to_numpy(np.float32), equal_nan=True):
        raise AssertionError("the stored eGeMAPS rows differ from openSMILE's")
    print(
        f"egemaps: {audio_s:.1f} s of audio; openSMILE {t_raw:.2f} s, "
        f"store path {t_store:.2f} s, decode {decode_s:.2f} s"
    )
    return [
        record(
            "egemaps.store_vs_opensmile",
            audio_s / t_store,
            "x real time",
            baseline="opensmile.Smile.process_signal on the same 16 kHz audio",
            baseline_value=audio_s / t_raw,
            goal=">= 0.9",
        ),
        record(
            "egemaps.real_time_factor",
            t_store / audio_s,
            "s per s of audio",
            baseline="opensmile.Smile.process_signal",
            baseline_value=t_raw / audio_s,
        ),
        record("egemaps.audio_decode", decode_s / audio_s, "s per s of audio"),
    ]
