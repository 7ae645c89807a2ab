"""Rating files checked against what they rate: each target's declared scale and the share of
the recording a file covers (docs/corpus.md, rating scales and coverage).

>>> parse_targets({"valence": {"scale": [1, 9]}}, "featurestore.yaml")
{'valence': (1.0, 9.0)}
>>> coverage_problem("r2.csv", (30.0, 48.0), 18.0, 0.5, "rec.mp4")[:63]
'r2.csv: its times span 30.00-48.00 s but the recording (rec.mp4'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..storage.layouts import layout_of
from ..storage.shard import LABEL_FPS
from .annotations import AnnotationError, TimedRating, read_label_file, split_label_key
from .media import MediaError, probe

#: the share of its recording a rating file must cover, when none is declared
DEFAULT_MIN_COVERAGE = 0.5

Scale = tuple[float, float]


def parse_targets(raw: Any, where: str) -> dict[str, Scale]:
    """Target -> (low, high) of a ``targets:`` mapping (``{valence: {scale: [1, 9]}}``);
    ValueError naming ``where`` and the key for anything else, or low >= high."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"{where}: targets: expected a mapping of target -> {{scale: [low, high]}}, got {raw!r}"
        )
    out: dict[str, Scale] = {}
    for target, spec in raw.items():
        key = f"{where}: targets.{target}"
        if target == "__line__":
            continue
        if not isinstance(spec, Mapping) or set(spec) - {"scale", "__line__"}:
            raise ValueError(f"{key}: expected {{scale: [low, high]}}, got {spec!r}")
        scale = spec.get("scale")
        numbers = (
            [float(v) for v in scale]
            if isinstance(scale, Sequence)
            and not isinstance(scale, str)
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in scale)
            else []
        )
        if len(numbers) != 2 or not all(math.isfinite(v) for v in numbers):
            raise ValueError(
                f"{key}.scale: expected [low, high], two finite numbers, got {scale!r}"
            )
        if not numbers[0] < numbers[1]:
            raise ValueError(f"{key}.scale: low {numbers[0]:g} is not below high {numbers[1]:g}")
        out[str(target)] = (numbers[0], numbers[1])
    return out


def parse_min_coverage(raw: Any, where: str) -> float | None:
    """A declared ``min_coverage`` (a share in [0, 1]; 0 turns the check off), or None;
    ValueError naming ``where`` for anything else."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0.0 <= raw <= 1.0:
        raise ValueError(
            f"{where}: min_coverage: expected a share of the recording in [0, 1] (e.g. 0.5), "
            f"got {raw!r}"
        )
    return float(raw)


def label_scale(key: str, scales: Mapping[str, Sequence[float]]) -> Scale | None:
    """The declared scale of label key ``target`` or ``target@rater``; None when undeclared.

    >>> label_scale("valence@r1", {"valence": [1, 9]}), label_scale("arousal", {})
    ((1.0, 9.0), None)
    """
    scale = scales.get(split_label_key(key)[0])
    return None if scale is None else (float(scale[0]), float(scale[1]))


def rating_span(rating: np.ndarray | TimedRating) -> tuple[float, float]:
    """The seconds a rating covers: a timed one's first to last time, a per-frame one's frames
    at 25 fps (0 to ``n / 25``)."""
    if isinstance(rating, TimedRating):
        return float(rating.time[0]), float(rating.time[-1])
    return 0.0, len(rating) / LABEL_FPS


def coverage_problem(
    path: str | Path,
    span: tuple[float, float],
    recording_s: float,
    min_coverage: float,
    recording: str,
) -> str | None:
    """The error of a rating file whose ``span`` (seconds) covers less than ``min_coverage`` of
    a recording lasting ``recording_s`` seconds (named ``recording``); None when it covers enough."""
    first, last = span
    covered = max(0.0, min(last, recording_s) - max(first, 0.0))
    if recording_s <= 0 or covered >= min_coverage * recording_s - 1e-6:
        return None
    return (
        f"{path}: its times span {first:.2f}-{last:.2f} s but the recording ({recording}) spans "
        f"0-{recording_s:.2f} s, so {covered / recording_s:.0%} of it is rated, less than "
        f"min_coverage {min_coverage:g}; check that the file rates this recording and that its "
        "times are seconds from the recording's start (or lower min_coverage in featurestore.yaml "
        "or the manifest)"
    )


def _recording(sf: Any) -> tuple[float, str] | None:
    """(seconds, file) of a session's main video; None without a readable one (extraction says)."""
    video = sf.video or sf.media.get("video_person") or sf.media.get("video_partner")
    if video is None:
        return None
    try:
        info = probe(video)
    except (MediaError, OSError, ValueError):
        return None
    if not info.fps or info.n_frames <= 0:
        return None
    return info.n_frames / info.fps, str(video)


def check_session_labels(sf: Any) -> list[tuple[Path, str]]:
    """(file, problem) of each rating file of a scanned session (a
    :class:`~featurestore.sources.manifest.SessionFiles`) that cannot be used: unreadable, a
    header of neither format, a value outside its target's declared scale (file, line and value
    named), or times covering less than the session's ``min_coverage`` of its main video."""
    recording = _recording(sf)
    share = DEFAULT_MIN_COVERAGE if sf.min_coverage is None else sf.min_coverage
    out: list[tuple[Path, str]] = []
    for key, path in sorted(sf.annotations.items()):
        try:
            rating = read_label_file(path, label_scale(key, sf.scales))
        except AnnotationError as e:
            out.append((path, str(e)))
            continue
        if recording is not None:
            problem = coverage_problem(path, rating_span(rating), recording[0], share, recording[1])
            if problem:
                out.append((path, problem))
    return out


def apply_declarations(
    sessions: Sequence[Any],
    targets: Mapping[str, Mapping[str, Any]],
    min_coverage: float | None,
    where: str,
) -> None:
    """Add the config's declarations (``targets`` as in featurestore.yaml, ``min_coverage``) to
    scanned sessions, in place: they replace the OMG layout's own, and must agree with a
    manifest's (ValueError naming ``where`` otherwise: the session's layout checks)."""
    scales = {t: [float(v) for v in spec["scale"]] for t, spec in targets.items()}
    for sf in sessions:
        layout_of(sf.layout).check_declarations(sf, scales, min_coverage, where)
        sf.scales = {**sf.scales, **scales}
        if min_coverage is not None:
            sf.min_coverage = min_coverage
