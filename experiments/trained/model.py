"""A configuration fitted once for use: from a session's 25 fps frame table (its channels'
columns and valid flags) to its per-frame predictions, post-processing included, saved as a
folder that loads without running stored code (docs/using_a_model.md)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from featurestore.storage.store import Store

from ..config.gold_standard import gold_standard_of
from ..config.grid import Trial, trial_from_params
from ..data.dataset import load_sessions, with_labels
from ..data.session_table import SessionTable
from ..errors import ExperimentsError
from ..evaluation.evaluate import PostProcess, fit_postprocess, split_sessions
from ..evaluation.fitting import FitPart, FitResult, LinearModel, _Model, final_model, fit_group
from ..models.postprocess import Rescaler
from ..models.ridge_stats import LinearFit
from ..tracking.provenance import code_version
from ..windowing.windowed import WindowedSession, window_sessions
from .formats import SavedEstimatorError, load_estimator, save_estimator

#: the version of the folder's layout (``model.json``'s ``format``)
FORMAT = 1
#: the frame table's column of the listener's id, and a channel's valid flags: ``<channel>:valid``
LISTENER_COLUMN = "listener"
VALID_SUFFIX = ":valid"


class ModelError(ExperimentsError, ValueError):
    """A model that cannot predict these frames (missing columns, other extractors, another
    frame rate) or a folder that is not a model; the message says what differs and what to do."""


def valid_column(channel: str) -> str:
    return channel + VALID_SUFFIX


@dataclass
class TrainedModel:
    """A configuration fitted on its training sessions, as its sweep fitted it.

    ``columns``/``channels``/``column_channel``: the frame table it reads (a
    :class:`SessionTable`'s); ``predictor``: the fitted model (a :class:`LinearModel` or the
    pipeline's :class:`~experiments.evaluation.fitting.FitResult`); ``post``: its fitted
    post-processing; ``provenance``: the code, store fingerprint, extractors and sessions it was
    trained on."""

    trial: Trial
    columns: list[str]
    channels: list[str]
    column_channel: np.ndarray
    names: list[str]
    predictor: LinearModel | FitResult
    post: PostProcess
    fps: float
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_listener(self) -> bool:
        """Whether a prediction reads who is listening (the personalized track)."""
        return self.trial.track == "personalized"

    def raw(self, s: WindowedSession) -> np.ndarray:
        """The model's predictions of a windowed session, before post-processing."""
        if isinstance(self.predictor, LinearModel):
            return self.predictor.raw(s)
        return _Model(self.trial, self.predictor).raw(s)

    def predict_table(self, table: SessionTable) -> np.ndarray:
        """One session's per-frame predictions (float64, one per frame of ``table``)."""
        w = window_sessions([table], self.trial.window_key()).sessions[0]
        return self.post.apply(self.raw(w), table.listener, table.fps)

    def predict_frame(self, frames: pd.DataFrame, session: str = "frames") -> np.ndarray:
        """:meth:`predict_table` of one session's frame table (:meth:`frame_columns`, a row per frame)."""
        return self.predict_table(self.table(frames, session))

    def frame_columns(self) -> list[str]:
        """The frame table's columns: the listener's id, every feature column, each channel's valid flags."""
        return [LISTENER_COLUMN, *self.columns, *map(valid_column, self.channels)]

    def table(self, frames: pd.DataFrame, session: str = "frames") -> SessionTable:
        """``frames`` (:meth:`frame_columns`) as the :class:`SessionTable` the model reads."""
        need = [*self.columns, *map(valid_column, self.channels)]
        if self.needs_listener:
            need.append(LISTENER_COLUMN)
        missing = [c for c in need if c not in frames.columns]
        if missing:
            raise ModelError(
                f"{session}: the frame table lacks {len(missing)} column(s) the model reads: "
                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; give the columns "
                "of TrainedModel.frame_columns() (experiments predict builds them from a store)"
            )
        listener = frames[LISTENER_COLUMN] if LISTENER_COLUMN in frames else pd.Series([0])
        ids = pd.unique(listener)
        if len(ids) != 1:
            raise ModelError(f"{session}: one session's frames hold one listener, got {ids[:5]}")
        n = len(frames)
        return SessionTable(
            session,
            int(ids[0]),
            0,
            "predict",
            frames[self.columns].to_numpy(np.float32),
            list(self.columns),
            frames[[valid_column(c) for c in self.channels]].to_numpy(bool),
            list(self.channels),
            self.column_channel,
            np.full(n, np.nan, np.float32),
            self.trial.target,
            fps=self.fps,
        )

    def check(
        self, tables: Sequence[SessionTable], extractors: dict[str, dict], allow: bool
    ) -> None:
        """:class:`ModelError` (a warning with ``allow``) when ``tables`` (and the store's
        ``extractors`` of its channels) differ from what the model was trained on."""
        problems = []
        trained = self.provenance.get("extractors", {})
        for key in self.channels:
            want, got = trained.get(key), extractors.get(key)
            if want and got and want != got:
                problems.append(
                    f"channel {key} was extracted by {_extractor_text(got)}, the model was "
                    f"trained on {_extractor_text(want)}"
                )
        for t in tables[:1]:
            if t.columns != self.columns:
                missing = sorted(set(self.columns) - set(t.columns))
                extra = sorted(set(t.columns) - set(self.columns))
                problems.append(
                    f"session {t.session} has other columns than the model read (missing: "
                    f"{missing[:5]}, not read: {extra[:5]})"
                )
        problems += [
            f"session {t.session} is at {t.fps:g} fps, the model at {self.fps:g} fps"
            for t in tables
            if t.fps != self.fps
        ]
        if not problems:
            return
        text = "; ".join(problems)
        if not allow:
            raise ModelError(
                f"{text}: re-extract the store with the model's settings (`featurestore extract "
                "--force`) or train on this store; --allow-mismatch predicts anyway"
            )
        warnings.warn(f"predicting anyway (--allow-mismatch): {text}", stacklevel=2)


def _extractor_text(x: dict) -> str:
    return (
        f"{x.get('extractor')} {x.get('version')} {json.dumps(x.get('params', {}), sort_keys=True)}"
    )


def channel_extractors(store: Store, session: str, channels: Sequence[str]) -> dict[str, dict]:
    """``role/channel`` -> the extractor, version and params that computed it in ``session``."""
    with store.open_session(session) as shard:
        return {k: shard.extractor(k) for k in channels}


def store_tables(
    store: Store, trial: Trial, sessions: Sequence[str] | None = None, labelled: bool = True
) -> list[SessionTable]:
    """The frame tables of ``trial``'s channels as its sweep loads them (its splits unless
    ``sessions``; without ``labelled``, sessions without labels too, their labels NaN)."""
    splits = None if sessions is not None else {k: list(v) for k, v in trial.splits}
    return load_sessions(
        store,
        sorted(trial.channels),  # the sweep's column order (see explain.sweep_channels)
        target=trial.target,
        splits=splits,
        sessions=sessions,
        gold_standard=gold_standard_of(trial.gold_standard),
        require_labels=labelled,
    )


def train_model(
    trial: Trial, store: Store | str | os.PathLike, fingerprint: str = ""
) -> TrainedModel:
    """``trial`` fitted on its final training set of ``store`` exactly as its sweep fitted it:
    protocol ``val`` on the training stories (its validation and test predictions are then the
    run's), a cross-validation on training and validation (its test predictions are the run's)."""
    st = store if isinstance(store, Store) else Store(store)
    trial = replace(trial, unseen_listener=False, unseen_nested=False)
    tables = with_labels(store_tables(st, trial, labelled=False))  # as a sweep: none unlabelled
    if not tables:
        raise ModelError(f"no session of the splits {dict(trial.splits)} in {st.root}")
    w = window_sessions(tables, trial.window_key())
    parts = split_sessions(w, dict(trial.splits))
    if trial.protocol == "val":
        train, evaluate = parts["train"], parts["val"] + parts["test"]
    else:
        train, evaluate = parts["train"] + parts["val"], parts["test"]
    if not train:
        raise ModelError(f"no training session of {trial.label()} in {st.root}")
    need_post_fit = trial.rescale != "none"
    predictor, main = final_model(trial, train, evaluate, need_post_fit)
    fitted = fit_group(trial, train, evaluate, need_post_fit, False, {FitPart("main"): main})
    first = tables[0]
    provenance = {
        "code": code_version().tags(),
        "store_fingerprint": fingerprint,
        "extractors": channel_extractors(st, first.session, first.channels),
        "train_sessions": [s.session for s in train],
        "scored_sessions": [s.session for s in evaluate],
    }
    return TrainedModel(
        trial,
        list(first.columns),
        list(first.channels),
        first.column_channel,
        w.names,
        predictor if isinstance(predictor, LinearModel) else predictor.fitted,
        fit_postprocess(trial, fitted, train),
        first.fps,
        provenance,
    )


# --------------------------------------------------------------------------- the folder
def _fit_arrays(prefix: str, f: LinearFit) -> dict[str, np.ndarray]:
    return {
        f"{prefix}.coef": f.coef,
        f"{prefix}.offset": np.asarray(f.offset, np.float64),
        f"{prefix}.fill": f.fill,
        f"{prefix}.n_rows": np.asarray(f.n_rows, np.int64),
    }


def _load_fit(z: Any, prefix: str) -> LinearFit:
    return LinearFit(
        z[f"{prefix}.coef"],
        float(z[f"{prefix}.offset"]),
        z[f"{prefix}.fill"],
        int(z[f"{prefix}.n_rows"]),
    )


def _save_predictor(predictor: LinearModel | FitResult, folder: Path) -> dict[str, Any]:
    if isinstance(predictor, FitResult):
        return {
            "kind": "pipeline",
            "y_mean": predictor.y_mean,
            "n_rows": predictor.n_rows,
            "estimator": save_estimator(predictor.model, folder),
        }
    arrays = {"shift": predictor.shift, "nan_columns": predictor.nan_columns}
    arrays |= _fit_arrays("overall", predictor.overall)
    for listener, f in predictor.own.items():
        arrays |= _fit_arrays(f"own.{listener}", f)
    arrays |= {f"fill.{k}": v for k, v in predictor.fills.items()}
    np.savez(folder / "linear.npz", allow_pickle=False, **arrays)
    return {"kind": "linear", "file": "linear.npz", "own": sorted(predictor.own)}


def _load_predictor(spec: dict[str, Any], folder: Path) -> LinearModel | FitResult:
    if spec["kind"] == "pipeline":
        try:
            model = load_estimator(folder, spec["estimator"])
        except SavedEstimatorError as e:
            raise ModelError(str(e)) from e
        return FitResult(model, float(spec["y_mean"]), int(spec["n_rows"]))
    with np.load(folder / spec["file"], allow_pickle=False) as z:
        own = {int(k): _load_fit(z, f"own.{k}") for k in spec["own"]}
        fills = {int(k[5:]): z[k] for k in z.files if k.startswith("fill.")}
        return LinearModel(z["shift"], z["nan_columns"], _load_fit(z, "overall"), own, fills)


def _post_dict(post: PostProcess) -> dict[str, Any]:
    r = post.rescaler
    return {
        "smooth_s": post.smooth_s,
        "smooth_method": post.smooth_method,
        "calibration": None if post.maps is None else [[k, *v] for k, v in post.maps.items()],
        "rescale": None
        if r is None
        else {
            "mode": r.mode,
            "min_samples": r.min_samples,
            "global": list(getattr(r, "global_", ())),
            "groups": [[k, *v] for k, v in getattr(r, "groups_", {}).items()],
            "per_listener": post.per_listener,
        },
    }


def _post_of(d: dict[str, Any]) -> PostProcess:
    post = PostProcess(float(d["smooth_s"]), str(d["smooth_method"]))
    if d["calibration"] is not None:
        post.maps = {k: (a, b) for k, a, b in d["calibration"]}
    if (r := d["rescale"]) is not None:
        post.rescaler = Rescaler(r["mode"], r["min_samples"])
        if r["global"]:
            post.rescaler.global_ = tuple(r["global"])
            post.rescaler.groups_ = {g[0]: tuple(g[1:]) for g in r["groups"]}
        post.per_listener = bool(r["per_listener"])
    return post


def save_model(model: TrainedModel, folder: str | os.PathLike) -> Path:
    """Write ``model`` into ``folder`` (created): ``model.json`` and its fitted parts
    (:mod:`experiments.trained.formats`; a closed-form model as ``linear.npz``)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT,
        "trial": model.trial.params(),
        "config_hash": model.trial.hash(),
        "columns": model.columns,
        "channels": model.channels,
        "column_channel": model.column_channel.tolist(),
        "names": model.names,
        "fps": model.fps,
        "predictor": _save_predictor(model.predictor, out),
        "post": _post_dict(model.post),
        "provenance": model.provenance,
    }
    (out / "model.json").write_text(json.dumps(doc, indent=1, allow_nan=True))
    return out


def load_model(folder: str | os.PathLike, name: str = "") -> TrainedModel:
    """The :class:`TrainedModel` of a folder :func:`save_model` wrote (``name``: what the messages
    call it, default the folder); warns when other code wrote it."""
    path = Path(folder) / "model.json"
    name = name or str(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(
            f"{path}: not a saved model ({e}); save one with `experiments save RUN_ID`"
        ) from e
    if doc.get("format") != FORMAT:
        raise ModelError(
            f"{path}: model format {doc.get('format')!r}, this code reads {FORMAT}: save the run "
            "again with this code (`experiments save RUN_ID`)"
        )
    trial = trial_from_params(doc["trial"])
    if trial.hash() != doc["config_hash"]:
        raise ModelError(
            f"{path}: its configuration gives config hash {trial.hash()}, it says "
            f"{doc['config_hash']}: written by other code; save the run again with this code"
        )
    code, here = doc["provenance"].get("code", {}), code_version().tags()
    if code.get("code_fingerprint") != here["code_fingerprint"]:
        warnings.warn(
            f"{name}: the model was saved by experiments {code.get('code_version')} (commit "
            f"{code.get('git_commit')}, code {code.get('code_fingerprint')}); this is "
            f"{here['code_version']} (commit {here['git_commit']}, code {here['code_fingerprint']})",
            stacklevel=2,
        )
    return TrainedModel(
        trial,
        list(doc["columns"]),
        list(doc["channels"]),
        np.asarray(doc["column_channel"], np.int64),
        list(doc["names"]),
        _load_predictor(doc["predictor"], path.parent),
        _post_of(doc["post"]),
        float(doc["fps"]),
        doc["provenance"],
    )


def frame_table(table: SessionTable) -> pd.DataFrame:
    """A session's frame table as the model's input: the listener's id, the feature columns, each
    channel's valid flags (``<channel>:valid``), a row per label frame."""
    out = pd.DataFrame(table.X.astype(np.float64), columns=table.columns)  # JSON's numbers
    out.insert(0, LISTENER_COLUMN, np.full(table.n_frames, table.listener, np.int64))
    flags = pd.DataFrame(table.valid, columns=[valid_column(c) for c in table.channels])
    return pd.concat([out, flags], axis=1)
