"""Video decoding, speaker/listener crops, and the audio track as mono PCM (PyAV).

A video is decoded once per extraction; frames are converted to RGB arrays only when a
face extractor wants them (the face sampling rate, 5 fps by default), which is where most
of the decoding cost would otherwise go.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

#: Official OMG-Empathy geometry: 2560 px wide, speaker left of x=1080, listener right of it.
REFERENCE_WIDTH = 2560
REFERENCE_SPLIT_X = 1080


class MediaError(RuntimeError):
    """A media file cannot be used; the message names the file and what to do."""


class NoAudioError(MediaError):
    """The video has no audio stream."""


@dataclass(frozen=True)
class VideoInfo:
    path: Path
    width: int
    height: int
    fps: float
    n_frames: int  # from the container; estimated from the duration when absent
    duration_s: float
    has_audio: bool
    audio_sampling_rate: int | None


def _open(path: Path):
    import av

    if not path.exists():
        raise MediaError(f"{path}: file not found")
    try:
        return av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise MediaError(
            f"{path}: cannot be opened as a video ({e}); the file is corrupt or truncated - "
            "re-copy it from the corpus or re-encode it with ffmpeg"
        ) from e


def probe(path: str | Path) -> VideoInfo:
    """Read the geometry, frame rate, length and audio presence of a video without decoding it."""
    path = Path(path)
    with _open(path) as c:
        if not c.streams.video:
            raise MediaError(f"{path}: has no video stream; is it an audio file?")
        v = c.streams.video[0]
        fps = float(v.average_rate or v.guessed_rate or 25)
        if v.duration is not None and v.time_base is not None:
            duration = float(v.duration * v.time_base)
        elif c.duration is not None:
            duration = c.duration / 1_000_000
        else:
            duration = 0.0
        n = int(v.frames) if v.frames else int(round(duration * fps))
        a = c.streams.audio[0] if c.streams.audio else None
        return VideoInfo(
            path=path,
            width=int(v.codec_context.width),
            height=int(v.codec_context.height),
            fps=fps,
            n_frames=n,
            duration_s=duration if duration else n / fps,
            has_audio=a is not None,
            audio_sampling_rate=int(a.sample_rate) if a is not None else None,
        )


def role_regions(width: int, split_x: int | None = None) -> dict[str, tuple[int, int]]:
    """Horizontal pixel ranges ``[x0, x1)`` of the speaker (left) and listener (right).

    ``split_x`` defaults to the official x=1080 of 2560, scaled proportionally to ``width``.

    >>> role_regions(2560)
    {'speaker': (0, 1080), 'listener': (1080, 2560)}
    >>> role_regions(1280)
    {'speaker': (0, 540), 'listener': (540, 1280)}
    """
    if split_x is None:
        split_x = int(round(width * REFERENCE_SPLIT_X / REFERENCE_WIDTH))
    if not 0 < split_x < width:
        raise ValueError(f"crop split x={split_x} is outside a {width}-pixel-wide frame")
    return {"speaker": (0, int(split_x)), "listener": (int(split_x), int(width))}


def sample_mask_step(video_fps: float, target_fps: float | None) -> float:
    """Frames per sample: 1 keeps every frame, 5 keeps every fifth of 25 fps for 5 fps."""
    if not target_fps or target_fps >= video_fps:
        return 1.0
    return video_fps / target_fps


def iter_frames(
    path: str | Path,
    sample_fps: float | None = None,
    threads: bool = True,
) -> Iterator[tuple[int, float, np.ndarray]]:
    """Yield ``(frame_index, time_s, rgb)`` for frames sampled at ``sample_fps`` (all when None).

    Time stamps are ``frame_index / fps`` (frame-accurate at constant frame rate, like the
    labels). Every frame is decoded (inter-frame codecs need it) but only sampled frames are
    converted to RGB. A decoding error mid-file raises :class:`MediaError` naming the file.
    """
    import av

    path = Path(path)
    c = _open(path)
    try:
        if not c.streams.video:
            raise MediaError(f"{path}: has no video stream")
        stream = c.streams.video[0]
        if threads:
            stream.thread_type = "AUTO"
        fps = float(stream.average_rate or stream.guessed_rate or 25)
        step = sample_mask_step(fps, sample_fps)
        next_sample = 0.0
        i = -1
        try:
            for frame in c.decode(stream):
                i += 1
                if i + 1e-9 < next_sample:
                    continue
                next_sample += step
                yield i, i / fps, frame.to_ndarray(format="rgb24")
        except av.error.FFmpegError as e:
            raise MediaError(f"{path}: decoding failed after {i + 1} frames ({e}); the file is corrupt or truncated - re-copy or re-encode it") from e
        if i < 0:
            raise MediaError(f"{path}: no frame could be decoded; the file is corrupt or empty - re-copy or re-encode it")
    finally:
        c.close()


def read_audio(path: str | Path, sampling_rate: int = 16000) -> np.ndarray:
    """The audio track as mono float32 in [-1, 1] at ``sampling_rate`` Hz (resampled by FFmpeg).

    Raises :class:`NoAudioError` when the file has no audio stream.
    """
    import av

    path = Path(path)
    c = _open(path)
    try:
        if not c.streams.audio:
            raise NoAudioError(f"{path}: has no audio track; audio channels (egemaps) are skipped for it")
        stream = c.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=sampling_rate)
        chunks: list[np.ndarray] = []
        try:
            for frame in c.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
        except av.error.FFmpegError as e:
            raise MediaError(f"{path}: audio decoding failed ({e}); the file is corrupt or truncated - re-copy or re-encode it") from e
    finally:
        c.close()
    if not chunks:
        raise NoAudioError(f"{path}: the audio track is empty; audio channels (egemaps) are skipped for it")
    return np.concatenate(chunks).astype(np.float32, copy=False)


def fraction_fps(fps: float) -> Fraction:
    """A frame rate as a Fraction, for encoders."""
    return Fraction(fps).limit_denominator(1001)
