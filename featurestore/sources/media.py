"""Video decoding (PyAV), speaker/listener crops, and the audio track as mono PCM. Only the
sampled frames are converted, and only to the pixel formats asked for (``face_geom`` reads the
decoded luma plane itself).
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..errors import FeaturestoreError

#: Official OMG-Empathy geometry: 2560 px wide, speaker left of x=1080, listener right of it.
REFERENCE_WIDTH = 2560
REFERENCE_SPLIT_X = 1080


class MediaError(FeaturestoreError, RuntimeError):
    """A media file cannot be used; the message names the file and what to do."""


class NoAudioError(MediaError):
    """The video has no audio stream."""


@dataclass(frozen=True)
class VideoInfo:
    """A video's geometry (pixels), rate (frames/s), length and whether it has audio;
    ``variable_rate``: its average rate differs from its base rate (a variable-rate recording)."""

    path: Path
    width: int
    height: int
    fps: float
    n_frames: int  # from the container; estimated from the duration when absent
    duration_s: float
    has_audio: bool
    audio_sampling_rate: int | None
    variable_rate: bool = False


def _open(path: Path) -> Any:
    """The PyAV container of ``path``; :class:`MediaError` when missing or unreadable."""
    import av  # lazily: PyAV takes 0.15 s to import and only decoding needs it

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
            variable_rate=bool(v.average_rate and v.base_rate and v.average_rate != v.base_rate),
        )


def role_regions(width: int, split_x: int | None = None) -> dict[str, tuple[int, int]]:
    """Pixel columns ``[x0, x1)`` of the speaker (left) and listener (right), split at ``split_x``
    (default: the official x=1080 of 2560, scaled to ``width``).

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


#: pixel formats :func:`iter_frames` gives: (H, W, 3) RGB, or (H, W) luma in full range
PIXEL_FORMATS = ("rgb24", "gray")
#: 8-bit YUV layouts whose first plane is the luma (Y) at full resolution
_YUV8 = frozenset(
    {"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "nv12", "nv21"}
)
#: limited-range ("TV", 16-235) luma -> full range (0-255), what FFmpeg's own gray conversion does
_LIMITED_TO_FULL = np.clip(np.round((np.arange(256) - 16) * 255 / 219), 0, 255).astype(np.uint8)
_COLOR_RANGE_JPEG = 2  # AVCOL_RANGE_JPEG: full range


def luma(frame: Any) -> np.ndarray:
    """(H, W) uint8 full-range grey image of a decoded PyAV frame: for 8-bit YUV the Y plane itself
    (equal to FFmpeg's ``gray`` conversion, about 10x cheaper), else FFmpeg's conversion."""
    name = frame.format.name
    if name not in _YUV8:
        return frame.to_ndarray(format="gray")
    plane = frame.planes[0]
    y = np.frombuffer(plane, np.uint8).reshape(frame.height, plane.line_size)[:, : frame.width]
    if name.startswith("yuvj") or frame.color_range == _COLOR_RANGE_JPEG:
        return y.copy()
    import cv2  # lazily: OpenCV takes 0.1 s to import, needed for limited-range video only

    return cv2.LUT(y, _LIMITED_TO_FULL)


def _convert(frame: Any, pixel_format: str) -> np.ndarray:
    return luma(frame) if pixel_format == "gray" else frame.to_ndarray(format="rgb24")


def iter_frames(
    path: str | Path,
    sample_fps: float | None = None,
    threads: bool = True,
    *,
    pixel_format: str | tuple[str, ...] = "rgb24",
    prefetch: int = 0,
) -> Iterator[tuple[int, float, np.ndarray | dict[str, np.ndarray]]]:
    """``(frame_index, time_s, image)`` of the frames sampled at ``sample_fps`` (all when None):
    ``time_s`` is the frame's presentation time from the stream's start (``frame_index / fps`` at
    a constant rate), a sampled frame the first at or after a multiple of ``1 / sample_fps``.
    ``pixel_format``: ``rgb24`` ((H, W, 3)), ``gray`` ((H, W), :func:`luma`) or a tuple of them
    (then ``image`` is format -> array); ``prefetch`` > 0 decodes that many sampled frames ahead
    in a thread. A decoding error, or a frame without a timestamp or out of order, raises
    :class:`MediaError`.
    """
    formats = (pixel_format,) if isinstance(pixel_format, str) else tuple(pixel_format)
    unknown = [f for f in formats if f not in PIXEL_FORMATS]
    if unknown or not formats:
        raise ValueError(f"pixel format {pixel_format!r}: use one or more of {PIXEL_FORMATS}")
    frames = _decode_sampled(
        Path(path), sample_fps, threads, formats, isinstance(pixel_format, str)
    )
    return _prefetched(frames, prefetch) if prefetch > 0 else frames


def _decode_sampled(
    path: Path, sample_fps: float | None, threads: bool, formats: tuple[str, ...], single: bool
) -> Generator[tuple[int, float, Any], None, None]:
    import av  # lazily: PyAV takes 0.15 s to import and only decoding needs it

    c = _open(path)
    try:
        if not c.streams.video:
            raise MediaError(f"{path}: has no video stream")
        stream = c.streams.video[0]
        if threads:
            stream.thread_type = "AUTO"
        rate = Fraction(stream.average_rate or stream.guessed_rate or 25)
        fps, tick = float(rate), Fraction(stream.time_base) * rate
        step = fps / sample_fps if sample_fps else 0.0  # frames at the average rate per sample
        start, next_sample, last = stream.start_time, 0.0, -math.inf
        i = -1
        try:
            for frame in c.decode(stream):
                i += 1
                if frame.pts is None:
                    raise MediaError(
                        f"{path}: frame {i} has no presentation timestamp, so its time is unknown if "
                        "the frame rate is variable; remux it into MP4 at a constant rate "
                        "(ffmpeg -i VIDEO -fps_mode cfr OUT.mp4)"
                    )
                start = frame.pts if start is None else start
                pos = float((frame.pts - start) * tick)  # the frame's index at a constant rate
                if pos <= last:
                    raise MediaError(
                        f"{path}: frame {i} is stamped {pos / fps:.3f} s, not after the frame before "
                        f"it ({last / fps:.3f} s); re-encode it (ffmpeg -i VIDEO -fps_mode cfr OUT.mp4)"
                    )
                last = pos
                if step:
                    if pos + 1e-9 < next_sample:
                        continue
                    next_sample += step
                    if next_sample <= pos + 1e-9:  # after a gap: the next multiple of step
                        next_sample = (math.floor((pos + 1e-9) / step) + 1) * step
                images = {f: _convert(frame, f) for f in formats}
                yield i, pos / fps, images[formats[0]] if single else images
        except av.error.FFmpegError as e:
            raise MediaError(
                f"{path}: decoding failed after {i + 1} frames ({e}); "
                "the file is corrupt or truncated - re-copy or re-encode it"
            ) from e
        if i < 0:
            raise MediaError(
                f"{path}: no frame could be decoded; the file is corrupt or empty - re-copy or re-encode it"
            )
    finally:
        c.close()


#: what a prefetched generator yields
T = TypeVar("T")


def _prefetched(items: Generator[T, None, None], size: int) -> Iterator[T]:
    """``items`` produced by a thread up to ``size`` ahead, in order (its exception raised here;
    closing early stops and joins it)."""
    q: queue.Queue = queue.Queue(maxsize=size)
    stop = threading.Event()

    def put(entry: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
            put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put(("error", e))
        finally:
            items.close()

    thread = threading.Thread(target=produce, name="iter_frames-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join()


def read_audio(path: str | Path, sampling_rate: int = 16000) -> np.ndarray:
    """The audio track as mono float32 in [-1, 1] at ``sampling_rate`` Hz (resampled by FFmpeg);
    :class:`NoAudioError` without one."""
    import av  # lazily: PyAV takes 0.15 s to import and only decoding needs it

    path = Path(path)
    c = _open(path)
    try:
        if not c.streams.audio:
            raise NoAudioError(
                f"{path}: has no audio track; audio channels (egemaps) are skipped for it"
            )
        stream = c.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=sampling_rate)
        chunks: list[np.ndarray] = []
        try:
            for frame in itertools.chain(c.decode(stream), [None]):  # None: flush the resampler
                chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(frame)]
        except av.error.FFmpegError as e:
            raise MediaError(
                f"{path}: audio decoding failed ({e}); the file is corrupt or truncated - re-copy or re-encode it"
            ) from e
    finally:
        c.close()
    if not chunks:
        raise NoAudioError(
            f"{path}: the audio track is empty; audio channels (egemaps) are skipped for it"
        )
    return np.concatenate(chunks).astype(np.float32, copy=False)
