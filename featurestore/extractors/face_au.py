"""Facial action units from py-feat (optional extra ``pyfeat``): channel ``face_au``, one AU
activation column (``AU01`` ...) for the largest face in each sampled crop, NaN and invalid
without a face. py-feat (which pulls in torch and sets ``OMP_NUM_THREADS``) is imported only
here, and its weights are loaded offline, never downloaded: docs/channels.md (``face_au``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from ..features import Features
from .base import ExtractorConfig, ExtractorUnavailable, FrameExtractor, Track, register

#: py-feat AU column names: ``AU01`` ... (OpenFace's ``AU01_r``/``AU01_c`` are not matched)
AU_COLUMN_RE = re.compile(r"^AU\d+$")
#: py-feat face box columns (pixels of the analysed image)
FACE_WIDTH, FACE_HEIGHT, FACE_SCORE = "FaceRectWidth", "FaceRectHeight", "FaceScore"

_INSTALL_HINT = (
    "install the optional extra with `pip install -e .[pyfeat]` (py-feat>=0.6); on a machine "
    "without a GPU install the CPU builds of torch and torchvision first, from the PyTorch "
    "CPU wheel index, so pip does not pull the multi-GB CUDA wheels"
)
_WEIGHTS_HINT = (
    "py-feat downloads its model weights from the Hugging Face hub on first use, and this "
    "extractor never downloads (the hub is used in offline mode). On a machine with internet "
    "access and the same py-feat version, run once\n"
    '    python -c "import feat; feat.{detector}({kwargs})"\n'
    "then copy the folder printed by\n"
    '    python -c "import feat.utils.io as io; print(io.get_resource_path())"\n'
    "(it holds the models--py-feat--* folders) to the same place on this machine "
    "(the folder printed by that command here); py-feat passes that folder to the hub "
    "explicitly, so HF_HOME or ~/.cache/huggingface are not used"
)


@dataclass(frozen=True)
class FaceAUConfig(ExtractorConfig):
    """Settings of :class:`FaceAUExtractor` (all in the cache key)."""

    #: py-feat detector class: ``Detectorv1`` (RetinaFace + landmarks + XGBoost AUs) or
    #: ``Detectorv2`` (multitask network; ignores the three model names below)
    detector: str = "Detectorv1"
    #: face detector of Detectorv1: ``retinaface`` or ``img2pose``
    face_model: str = "retinaface"
    #: landmark model of Detectorv1: ``mobilefacenet``, ``mobilenet`` or ``pfld``
    landmark_model: str = "mobilefacenet"
    #: AU model of Detectorv1: ``xgb`` or ``svm``
    au_model: str = "xgb"
    #: torch device (``cpu``, ``cuda``, ``mps``)
    device: str = "cpu"
    #: crops sent to the detector in one call (all of one size: one video, one role)
    batch_size: int = 8
    #: faces scoring below this are ignored (0-1)
    face_detection_threshold: float = 0.5


def _detector_kwargs(cfg: FaceAUConfig) -> dict[str, Any]:
    """The py-feat detector's arguments: only what AUs need."""
    if cfg.detector == "Detectorv2":
        return {"device": cfg.device, "identity_model": None}
    return {
        "face_model": cfg.face_model,
        "landmark_model": cfg.landmark_model,
        "au_model": cfg.au_model,
        "emotion_model": None,
        "identity_model": None,
        "gaze_model": None,
        "device": cfg.device,
    }


_HUB_LOCK = threading.Lock()


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """The Hugging Face hub offline (a missing file fails at once): the variable for a first
    import of ``huggingface_hub``, its module constant for an imported one; both restored."""
    with _HUB_LOCK:
        old_env = os.environ.get("HF_HUB_OFFLINE")
        os.environ["HF_HUB_OFFLINE"] = "1"
        constants: Any = sys.modules.get("huggingface_hub.constants")
        restore = (
            bool(getattr(constants, "HF_HUB_OFFLINE", False))
            if constants is not None
            else ((old_env or "").strip().upper() in {"1", "ON", "YES", "TRUE"})
        )
        if constants is not None:
            constants.HF_HUB_OFFLINE = True
        try:
            yield
        finally:
            if old_env is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = old_env
            constants = sys.modules.get("huggingface_hub.constants")
            if constants is not None:
                constants.HF_HUB_OFFLINE = restore


def _import_feat() -> Any:
    """Import py-feat, translating every failure into :class:`ExtractorUnavailable`."""
    try:
        with _hub_offline():
            import feat  # lazily: optional extra (pyfeat); it pulls in torch
    except ImportError as e:
        raise ExtractorUnavailable(
            f"face_au needs py-feat, which is not installed ({e}); {_INSTALL_HINT}"
        ) from e
    except (RuntimeError, OSError) as e:  # e.g. a CUDA torchvision next to a CPU torch
        raise ExtractorUnavailable(
            f"py-feat is installed but cannot be imported ({type(e).__name__}: {e}); torch and "
            f"torchvision must be matching builds (both CPU or both CUDA, same release); {_INSTALL_HINT}"
        ) from e
    return feat


@lru_cache(maxsize=2)
def _load_detector(cfg: FaceAUConfig) -> Any:
    """The py-feat detector for ``cfg``, weights loaded from local files only (cached per config)."""
    feat = _import_feat()
    cls = getattr(feat, cfg.detector, None)
    if cls is None:
        have = [n for n in ("Detectorv1", "Detectorv2") if hasattr(feat, n)]
        raise ExtractorUnavailable(
            f"py-feat {getattr(feat, '__version__', '?')} has no {cfg.detector!r}; it offers {have}: "
            "set face_au's `detector` to one of them"
        )
    kwargs = _detector_kwargs(cfg)
    try:
        with _hub_offline():
            detector = cls(**kwargs)
    except OSError as e:  # LocalEntryNotFoundError is a FileNotFoundError
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ExtractorUnavailable(
            f"py-feat model weights for {cfg.detector} are not on this machine "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). "
            + _WEIGHTS_HINT.format(detector=cfg.detector, kwargs=args)
        ) from e
    except ValueError as e:
        raise ExtractorUnavailable(f"py-feat rejected the face_au settings {kwargs}: {e}") from e
    return detector


def au_columns_of(fex: pd.DataFrame) -> list[str]:
    """AU columns of a py-feat result: ``fex.au_columns`` when set, else the ``AUnn`` columns."""
    declared = getattr(fex, "au_columns", None)
    if declared:
        cols = [str(c) for c in declared if c in fex.columns]
        if cols:
            return cols
    return [str(c) for c in fex.columns if AU_COLUMN_RE.match(str(c))]


def largest_face_rows(fex: pd.DataFrame, frame_column: str = "frame") -> np.ndarray:
    """Row positions of the largest face (box area) of each frame, in frame order; a row
    without a box (py-feat's placeholder for no detection) ranks below any face."""
    frames = pd.to_numeric(fex[frame_column]).to_numpy()
    if FACE_WIDTH in fex.columns and FACE_HEIGHT in fex.columns:
        area = pd.to_numeric(fex[FACE_WIDTH]).to_numpy(dtype=np.float64) * pd.to_numeric(
            fex[FACE_HEIGHT]
        ).to_numpy(dtype=np.float64)
        area = np.where(np.isfinite(area), area, -np.inf)
    else:
        area = np.zeros(len(fex))
    order = np.lexsort((-area, frames))  # by frame, then largest area first
    _, first = np.unique(frames[order], return_index=True)
    return order[first]


def face_present(fex: pd.DataFrame) -> np.ndarray:
    """Per row: a face was detected (finite positive box, positive score where given)."""
    ok = np.ones(len(fex), dtype=bool)
    if FACE_WIDTH in fex.columns and FACE_HEIGHT in fex.columns:
        w = pd.to_numeric(fex[FACE_WIDTH]).to_numpy(dtype=np.float64)
        h = pd.to_numeric(fex[FACE_HEIGHT]).to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            ok &= np.isfinite(w) & np.isfinite(h) & (w > 0) & (h > 0)
    if FACE_SCORE in fex.columns:
        s = pd.to_numeric(fex[FACE_SCORE]).to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            ok &= np.isfinite(s) & (s > 0)
    return ok


def fex_to_features(
    fex: pd.DataFrame,
    times: Sequence[float] | np.ndarray,
    frames: Sequence[int] | np.ndarray | None = None,
    au_columns: Sequence[str] | None = None,
) -> Features:
    """py-feat output (a ``feat.Fex`` or any DataFrame with its columns) as Features: ``times[i]``
    (s) is the time of py-feat ``frame`` ``frames[i]`` (default ``0, 1, ...``); the largest face
    per frame; no face, no row or a non-finite AU value is invalid (NaN); columns: the AU ones.

    >>> df = pd.DataFrame({"frame": [0, 0, 1], "FaceRectWidth": [10.0, 40.0, float("nan")],
    ...                    "FaceRectHeight": [10.0, 40.0, float("nan")], "FaceScore": [0.9, 0.8, 0.0],
    ...                    "AU01": [0.1, 0.7, float("nan")]})
    >>> f = fex_to_features(df, times=[0.0, 0.2])
    >>> f.columns, np.round(f.data[:, 0].astype(float), 2).tolist(), f.valid.tolist()
    (['AU01'], [0.7, nan], [True, False])
    """
    times = np.asarray(times, dtype=np.float64).reshape(-1)
    frame_ids = np.arange(len(times)) if frames is None else np.asarray(frames).reshape(-1)
    if frame_ids.shape != times.shape:
        raise ValueError(f"{len(frame_ids)} frame ids for {len(times)} times")
    cols = list(au_columns) if au_columns is not None else au_columns_of(fex)
    missing = [c for c in cols if c not in fex.columns]
    if missing:
        raise ValueError(f"py-feat result lacks AU columns {missing}")
    if not cols:
        raise ValueError(
            f"py-feat result has no AU columns (columns: {list(fex.columns)[:12]} ...); "
            "was the detector built with au_model=None?"
        )
    data = np.full((len(times), len(cols)), np.nan, dtype=np.float32)
    valid = np.zeros(len(times), dtype=bool)
    if len(fex):
        if "frame" not in fex.columns:
            raise ValueError("py-feat result has no 'frame' column to match rows to frames")
        rows = largest_face_rows(fex)
        picked = fex.iloc[rows]
        picked_frames = pd.to_numeric(picked["frame"]).to_numpy()
        lookup = {int(f): i for i, f in enumerate(frame_ids)}
        unknown = [int(f) for f in picked_frames if int(f) not in lookup]
        if unknown:
            raise ValueError(
                f"py-feat rows for frames {unknown[:5]} that are not among the {len(times)} frames given"
            )
        pos = np.array([lookup[int(f)] for f in picked_frames], dtype=np.int64)
        values = picked[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
        ok = face_present(picked) & np.all(np.isfinite(values), axis=1)
        data[pos[ok]] = values[ok]
        valid[pos[ok]] = True
    return Features(data=data, time=times, valid=valid, columns=cols)


class _FaceAUTrack(Track):
    """Collects crops of one role and runs py-feat on batches of equal-sized crops."""

    def __init__(self, extractor: FaceAUExtractor) -> None:
        self._extractor = extractor
        self._images: list[np.ndarray] = []
        self._times: list[float] = []
        self._parts: list[Features] = []

    def add(self, time_s: float, image: np.ndarray) -> None:
        if self._images and image.shape != self._images[0].shape:
            self._flush()  # a batch is one tensor: crops of one size only
        self._images.append(np.ascontiguousarray(image))
        self._times.append(float(time_s))
        if len(self._images) >= max(1, int(self._extractor.config.batch_size)):
            self._flush()

    def _flush(self) -> None:
        if not self._images:
            return
        import torch  # present whenever py-feat is

        cfg = self._extractor.config
        detector = _load_detector(cfg)
        # (B, 3, H, W) uint8 RGB tensor: py-feat only reorders channels of numpy input
        batch = torch.from_numpy(np.stack(self._images)).permute(0, 3, 1, 2).contiguous()
        # Detectorv1.detect draws a tqdm bar per call even with progress_bar=False
        with _hub_offline(), torch.inference_mode(), contextlib.redirect_stderr(io.StringIO()):
            fex = detector.detect(
                batch,
                data_type="tensor",
                batch_size=len(self._images),
                face_detection_threshold=cfg.face_detection_threshold,
                progress_bar=False,
            )
        self._parts.append(fex_to_features(fex, self._times))
        self._images, self._times = [], []

    def result(self) -> Features:
        self._flush()
        if not self._parts:
            return Features(np.zeros((0, 0), np.float32), np.zeros(0), np.zeros(0, bool), [])
        cols = self._parts[0].columns
        for p in self._parts[1:]:
            if p.columns != cols:
                raise RuntimeError(
                    f"py-feat returned AU columns {p.columns} after {cols} within one video"
                )
        parts = self._parts
        data, time, valid = (
            np.concatenate([getattr(p, a) for p in parts]) for a in ("data", "time", "valid")
        )
        return Features(data, time, valid, cols)


@register
class FaceAUExtractor(FrameExtractor[FaceAUConfig]):
    """py-feat action-unit activations of the largest face in each sampled crop.

    >>> FaceAUExtractor().params()["detector"]
    'Detectorv1'
    """

    name = "face_au"
    version = "1"
    config_class = FaceAUConfig
    config: FaceAUConfig

    def check_available(self) -> None:
        """:class:`ExtractorUnavailable` unless py-feat imports and its weights load offline."""
        _load_detector(self.config)

    def new_track(self, role: str) -> Track:
        self.check_available()
        return _FaceAUTrack(self)
