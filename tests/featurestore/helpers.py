"""Helpers of the featurestore tests: small generated videos (nothing is downloaded)."""

from __future__ import annotations

import numpy as np

#: the shared tiny demo corpus's size (the ``tiny_demo`` fixture): 2 listeners x stories 1-2 x 6 s
TINY_DEMO = {"n_listeners": 2, "stories": (1, 2), "duration_s": 6}


def make_video(
    path,
    n_frames=50,
    width=320,
    height=96,
    fps=25,
    audio=True,
    sr=16000,
    seed=0,
    image=None,
    tremolo_hz=0.0,
    keep=None,
):
    """Write a small H.264 video with moving noise and, optionally, a tone on the audio track.

    ``image``: one (height, width, 3) uint8 frame shown throughout instead of the noise;
    ``tremolo_hz``: the tone's loudness swells at this rate (Hz) when > 0, else it is steady;
    ``keep``: the indices of the frames written, each stamped at its time ``i / fps`` (the
    others dropped: a variable-rate video).
    """
    from fractions import Fraction

    import av

    rng = np.random.default_rng(seed)
    with av.open(str(path), "w") as c:
        v = c.add_stream("libx264", rate=fps)
        v.width, v.height, v.pix_fmt = width, height, "yuv420p"
        a = None
        if audio:
            a = c.add_stream("aac", rate=sr)
            a.layout = "mono"
        for i in range(n_frames):
            img = (
                rng.integers(0, 255, (height, width, 3), dtype=np.uint8) if image is None else image
            )
            if keep is not None and i not in keep:
                continue
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            if keep is not None:
                frame.pts, frame.time_base = i, Fraction(1, fps)
            for p in v.encode(frame):
                c.mux(p)
        for p in v.encode():
            c.mux(p)
        if a is not None:
            t = np.arange(int(n_frames / fps * sr)) / sr
            sig = 0.3 * np.sin(2 * np.pi * 220 * t)
            if tremolo_hz > 0:
                sig *= 1 + np.sin(2 * np.pi * tremolo_hz * t)
            mux_audio(c, a, sig.astype(np.float32), sr)
    return path


def mux_audio(container, stream, signal: np.ndarray, sr: int) -> None:
    """Encode the mono ``signal`` (float32 ``flt`` or int16 ``s16`` samples at ``sr`` Hz) on the
    audio ``stream`` of the PyAV output ``container``, in chunks of 1024 samples, and flush it."""
    import av

    fmt = "s16" if signal.dtype == np.int16 else "flt"
    for start in range(0, len(signal), 1024):
        fr = av.AudioFrame.from_ndarray(
            signal[None, start : start + 1024], format=fmt, layout="mono"
        )
        fr.sample_rate = sr
        for p in stream.encode(fr):
            container.mux(p)
    for p in stream.encode():
        container.mux(p)
