"""The demo's file writers (annotation CSVs, SubRip transcripts, H.264 + AAC videos, templates;
each written atomically) and what a build reports (:class:`DemoInfo`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..files import replaced, write_atomic
from ..sources.media import role_regions
from .face import FaceRig, TileCache, even
from .model import GENERATOR_VERSION
from .plan import SessionPlan

TEMPLATES = Path(__file__).parent / "templates"


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class DemoInfo:
    """What a demo build wrote: its folder, sessions, frames per session, seed, seconds per
    session, frame size (pixels) and rate (frames/s), build time (s) and ``layout`` (``omg``:
    :func:`~featurestore.demo.build_demo`; ``monadic``: :func:`~featurestore.demo.build_monadic_demo`)."""

    out_dir: Path
    sessions: tuple[str, ...]
    n_frames: dict[str, int]
    seed: int
    duration_s: float
    width: int
    height: int
    fps: float
    build_seconds: float
    layout: str = "omg"

    @property
    def transcripts(self) -> list[Path]:
        """The transcript of each session (the OMG layout)."""
        folder = self.out_dir / "Transcripts"
        return [
            folder / f"{s.lower().replace('subject', 'transcribed_subject')}.srt"
            for s in self.sessions
        ]

    @property
    def observer_annotations(self) -> dict[str, list[Path]]:
        """Target -> the observer rating files, per session (the OMG layout)."""
        out: dict[str, list[Path]] = {}
        for role in ("listener", "speaker"):
            folder = self.out_dir / f"Observer_{role.title()}"
            out[f"valence_observer_{role}"] = [folder / f"{s}.csv" for s in self.sessions]
        return out

    def __str__(self) -> str:
        n, kind = len(self.sessions), "monadic " if self.layout == "monadic" else ""
        return (
            f"{n} {kind}session{'s' if n != 1 else ''} of {self.duration_s:g} s, {self.width}x"
            f"{self.height} at {self.fps:g} fps, seed {self.seed}, built in {self.build_seconds:.1f} s"
        )


def check_args(
    count: str, n: int, groups: str, duration_s: float, min_s: float, fps: float
) -> None:
    """ValueError naming the argument no demo can be built with: the ``count`` ``n``, the stories
    or tasks (``groups``: what is wrong with them, empty if nothing), ``duration_s`` or ``fps``."""
    if int(n) < 1:
        raise ValueError(f"demo: {count} must be >= 1, got {n}")
    if groups:
        raise ValueError(groups)
    if not duration_s >= min_s:
        raise ValueError(f"demo: duration_s must be at least {min_s:g} seconds, got {duration_s}")
    if not fps > 0:
        raise ValueError(f"demo: fps must be positive, got {fps}")


def truth_head(
    generator: str, seed: int, fps: float, duration_s: float, layout: Layout
) -> dict[str, Any]:
    """The first entries of a build's ``demo_truth.json``: what built it and how."""
    return {
        "generator": generator,
        "generator_version": GENERATOR_VERSION,
        "seed": int(seed),
        "fps": float(fps),
        "duration_s": float(duration_s),
        "width": layout.width,
        "height": layout.height,
    }


def write_corpus_files(
    out: Path,
    truth: dict[str, Any],
    readme: dict[str, Any],
    layout: str,
    started: float,
    n_frames: dict,
) -> DemoInfo:
    """A build's last files (``demo_truth.json``; README: ``templates/README_<layout>.md`` filled
    in with ``readme``; ``featurestore.yaml``) and its :class:`DemoInfo` (``started``: its
    ``time.perf_counter()``; ``n_frames``: per session)."""
    write_atomic(out / "demo_truth.json", (json.dumps(truth, indent=1) + "\n").encode())
    write_atomic(out / "README.md", _template(f"README_{layout}.md").format(**readme).encode())
    write_atomic(out / "featurestore.yaml", _template(f"featurestore_{layout}.yaml").encode())
    keys = ("seed", "duration_s", "width", "height", "fps")
    return DemoInfo(
        out_dir=out,
        sessions=tuple(n_frames),
        n_frames=n_frames,
        **{k: truth[k] for k in keys},
        build_seconds=time.perf_counter() - started,
        layout=layout,
    )


def valence_csv(valence: np.ndarray) -> str:
    """The official annotation format: header ``valence``, one ``%.6f`` row per frame."""
    return "valence\n" + "\n".join(f"{v:.6f}" for v in np.asarray(valence, dtype=np.float64)) + "\n"


def transcript_cues(plan: SessionPlan) -> list[tuple[float, float, list[str]]]:
    """The session's transcript: (start_s, end_s, lines) per cue, sorted by start. One ``[S]``
    cue per phrase and one ``[L]`` per backchannel, except: the first backchannel and the phrase
    before it share one cue with both tags, and the longest other phrase is split into two
    ``[S]`` cues that overlap by 0.4 s."""
    phrases, said = plan.voices.phrases, plan.words.phrase_words
    backchannels, replies = plan.voices.backchannels, plan.words.backchannel_words
    cues: list[tuple[float, float, list[str]]] = []
    merged_phrase = merged_bc = -1
    if backchannels:
        b0 = backchannels[0][0]
        before = [i for i, (_, p1) in enumerate(phrases) if p1 <= b0 + 1e-6]
        if before:
            merged_phrase, merged_bc = before[-1], 0
    others = [i for i in range(len(phrases)) if i != merged_phrase and len(said[i].split()) >= 4]
    split = max(others, key=lambda i: phrases[i][1] - phrases[i][0]) if others else -1
    for i, ((p0, p1), text) in enumerate(zip(phrases, said, strict=True)):
        if i == merged_phrase:
            b0, b1 = backchannels[merged_bc]
            cues.append((p0, b1, [f"[S] {text}", f"[L] {replies[merged_bc]}"]))
        elif i == split:
            words = text.split()
            half, mid = len(words) // 2, (p0 + p1) / 2
            cues.append((p0, mid + 0.2, ["[S] " + " ".join(words[:half])]))
            cues.append((mid - 0.2, p1, ["[S] " + " ".join(words[half:])]))
        else:
            cues.append((p0, p1, [f"[S] {text}"]))
    for j, ((b0, b1), word) in enumerate(zip(backchannels, replies, strict=True)):
        if j != merged_bc:
            cues.append((b0, b1, [f"[L] {word}"]))
    return sorted(cues, key=lambda c: c[0])


def _srt_time(t: float) -> str:
    ms = int(round(t * 1000))
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def transcript_srt(plan: SessionPlan) -> bytes:
    """The session's transcript as SubRip bytes: UTF-8 with a byte-order mark and CRLF line
    ends, as Windows subtitle editors write them."""
    blocks = [
        f"{i}\r\n{_srt_time(a)} --> {_srt_time(b)}\r\n" + "\r\n".join(lines)
        for i, (a, b, lines) in enumerate(transcript_cues(plan), start=1)
    ]
    return ("\ufeff" + "\r\n\r\n".join(blocks) + "\r\n").encode("utf-8")


@dataclass(frozen=True)
class Layout:
    """Where the faces go in a frame: each role's pixel columns ``[x0, x1)`` (its background),
    the tile size, each tile's top-left at rest and how far heads may move (pixels)."""

    width: int
    height: int
    regions: dict[str, tuple[int, int]]
    tile_h: int
    tile_w: int
    origin: dict[str, tuple[int, int]]
    motion_limit: tuple[int, int]


def frame_layout(width: int, height: int, rig: FaceRig) -> Layout:
    """The OMG demo's layout: the speaker's face centred left of the split, the listener's right."""
    if width % 2 or height % 2:
        raise ValueError(
            f"demo: width and height must be even for yuv420p video, got {width}x{height}"
        )
    regions = role_regions(width)
    split = regions["speaker"][1]
    th0, tw0 = rig.tile.shape[:2]
    scale = min(1.0, (height - 20) / th0, (split - 40) / tw0, (width - split - 40) / tw0)
    tile_h, tile_w = even(th0 * scale), even(tw0 * scale)
    if tile_h < 120:
        raise ValueError(
            f"demo: a {width}x{height} frame leaves a {tile_w}x{tile_h} px face tile, too small for "
            "face detection; use at least 640x180 (the default is 1280x360)"
        )
    y0 = even((height - tile_h) / 2)
    origin = {r: (even(x0 + (x1 - x0 - tile_w) / 2), y0) for r, (x0, x1) in regions.items()}
    mx = min(8, (split - tile_w) // 2 - 2, (width - split - tile_w) // 2 - 2)
    my = min(8, (height - tile_h) // 2)
    limit = (max(0, mx - mx % 2), max(0, my - my % 2))
    return Layout(width, height, regions, tile_h, tile_w, origin, limit)


def _background_i420(layout: Layout, colours: Mapping[str, np.ndarray]) -> np.ndarray:
    import cv2  # lazily: OpenCV takes 0.1 s to import, only a build needs it

    rgb = np.empty((layout.height, layout.width, 3), np.uint8)
    for role, (x0, x1) in layout.regions.items():
        rgb[:, x0:x1] = colours[role]
    # soft vertical shading, like a lit room
    shade = 0.92 + 0.08 * np.sin(np.linspace(0, np.pi, layout.height))[:, None, None]
    rgb = np.clip(rgb * shade, 0, 255).astype(np.uint8)
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420)


def video_frames(
    n_frames: int,
    states: Mapping[str, Mapping[str, np.ndarray]],
    offsets: Mapping[str, np.ndarray],
    layout: Layout,
    caches: Mapping[str, TileCache],
) -> Iterator[np.ndarray]:
    """The frames as packed yuv420p arrays ((H * 3 / 2, W) uint8; one buffer reused): each
    role's face (``caches``) in its ``states`` (smile/mouth/blink/brow per frame), moved by its
    ``offsets`` ((n_frames, 2) pixels), on its region's background."""
    h, w = layout.height, layout.width
    bg = _background_i420(layout, {r: c.bg for r, c in caches.items()})
    buf = bg.copy()
    y_plane = buf[:h]
    u_plane = buf[h : h + h // 4].reshape(h // 2, w // 2)
    v_plane = buf[h + h // 4 :].reshape(h // 2, w // 2)
    th, tw = layout.tile_h, layout.tile_w
    st = {
        role: np.stack([states[role][k] for k in ("smile", "mouth", "blink", "brow")], axis=1)
        for role in caches
    }
    for i in range(n_frames):
        np.copyto(buf, bg)
        for role, cache in caches.items():
            smile, mouth, blink, brow = (int(v) for v in st[role][i])
            ty, tu, tv = cache.get((smile, mouth, blink, brow))
            x = layout.origin[role][0] + int(offsets[role][i, 0])
            y = layout.origin[role][1] + int(offsets[role][i, 1])
            y_plane[y : y + th, x : x + tw] = ty
            u_plane[y // 2 : (y + th) // 2, x // 2 : (x + tw) // 2] = tu
            v_plane[y // 2 : (y + th) // 2, x // 2 : (x + tw) // 2] = tv
        yield buf


def write_video(
    path: Path, frames: Iterator[np.ndarray], layout: Layout, fps: float, audio: np.ndarray, sr: int
) -> None:
    """H.264 (libx264, single-threaded: deterministic) + AAC mono MP4, written atomically."""
    import av  # lazily: PyAV takes 0.15 s to import, only a build needs it

    rate = Fraction(fps).limit_denominator(1001)
    chunk = 1024
    with replaced(path) as tmp, av.open(str(tmp), "w", format="mp4") as c:
        vs = c.add_stream("libx264", rate=rate)
        vs.width, vs.height, vs.pix_fmt = layout.width, layout.height, "yuv420p"
        # veryfast with the cheapest motion search and no B-frames: ~1.6x faster than
        # plain veryfast for ~20% more bytes (the build time is mostly x264)
        vs.options = {
            "preset": "veryfast",
            "crf": "20",
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
            c.mux(vs.encode(frame))
            a_end = min(len(audio), int(round((i + 1) / fps * sr)))
            while a_pos + chunk <= a_end or (a_pos < a_end == len(audio)):
                piece = audio[a_pos : a_pos + chunk][None, :]
                af = av.AudioFrame.from_ndarray(
                    np.ascontiguousarray(piece), format="flt", layout="mono"
                )
                af.sample_rate = sr
                af.pts = a_pos
                af.time_base = Fraction(1, sr)
                c.mux(aus.encode(af))
                a_pos += piece.shape[1]
        c.mux(vs.encode())  # flush both encoders
        c.mux(aus.encode())
