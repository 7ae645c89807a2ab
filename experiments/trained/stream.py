"""A causal trained model run frame by frame (:class:`StreamingModel`), and ``experiments predict
--stream`` on frame table rows read from standard input (:func:`stream_csv`)."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from typing import Any, TextIO

import numpy as np

from ..models.postprocess import StreamingSmoother
from ..tracking.tracker import resolve_tracking_uri
from ..windowing.stream import StreamingWindows
from ..windowing.windowed import WindowedSession
from .model import LISTENER_COLUMN, ModelError, TrainedModel, valid_column
from .pyfunc import fetch_model

#: what a valid flag reads as True in a streamed CSV row
TRUE = frozenset({"1", "true", "True", "TRUE"})


class StreamingModel:
    """``model`` fed one frame at a time (:meth:`push`): each frame's prediction as soon as the
    frame is there, equal to :meth:`TrainedModel.predict_table` of the whole session. A model
    whose windows or smoothing read later frames is refused with the lookahead it needs."""

    def __init__(self, model: TrainedModel, listener: int = 0):
        ahead = model.trial.window_lookahead_s
        if ahead > 0:
            t = model.trial
            reads = "the session's length" if math.isinf(ahead) else f"{ahead:g} s of later frames"
            raise ModelError(
                f"model {t.label()} reads {reads} (windows {t.align}, delay {t.delay_s:g} s, "
                f"smoothing {t.smooth_method} {t.smooth_s:g} s): it cannot run frame by frame; "
                "stream a causal configuration (experiments/configs/causal.yaml)"
            )
        self.model, self.listener = model, int(listener)
        self.windows = StreamingWindows(
            model.trial.window_key(), model.columns, model.channels, model.column_channel, model.fps
        )
        post = model.post
        self.smoother = StreamingSmoother(post.smooth_method, post.smooth_s, model.fps)
        self._frame = WindowedSession(
            "stream",
            self.listener,
            0,
            "predict",
            np.empty((1, 0), np.float32),
            np.full(1, np.nan),
            model.fps,
        )

    def push(self, x: np.ndarray, valid: np.ndarray) -> float:
        """The prediction of the frame whose values (every column, NaN missing) and per-channel
        valid flags these are."""
        self._frame.F = self.windows.push(x, valid)[None, :]
        raw = self.model.raw(self._frame)
        post, listener = self.model.post, self.listener
        p = self.smoother.push(float(post.calibrate(raw, listener)[0]))
        return float(post.rescale(np.array([p]), listener)[0])

    def push_row(self, row: Mapping[str, Any]) -> float:
        """:meth:`push` of a frame table row (:meth:`TrainedModel.frame_columns` as keys)."""
        m = self.model
        x = np.array([_number(row[c]) for c in m.columns], np.float32)
        valid = np.array([str(row[valid_column(c)]) in TRUE for c in m.channels])
        return self.push(x, valid)


def _number(text: Any) -> float:
    return float(text) if text not in ("", None, "nan", "NaN") else math.nan


def stream_csv(model: str, tracking_uri: str | None, rows: TextIO, out: TextIO) -> int:
    """Read frame table rows (CSV with a header) from ``rows`` and write each frame's prediction
    (a header naming the target, 9 decimals) to ``out`` as soon as it is known; exit code 0."""
    trained = fetch_model(model, resolve_tracking_uri(tracking_uri))
    reader = csv.DictReader(rows)
    header = reader.fieldnames or []
    optional = () if trained.needs_listener else (LISTENER_COLUMN,)
    missing = [c for c in trained.frame_columns() if c not in header and c not in optional]
    if missing:
        raise ModelError(
            f"the streamed header lacks {', '.join(missing[:5])}: the first line names the "
            "frame table's columns (TrainedModel.frame_columns())"
        )
    stream = None
    out.write(trained.trial.target + "\n")
    for row in reader:
        if stream is None:
            stream = StreamingModel(trained, int(float(row.get(LISTENER_COLUMN) or 0)))
        out.write(f"{stream.push_row(row):.9f}\n")
        out.flush()
    return 0
